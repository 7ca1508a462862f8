package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"
)

// clientTLSFlags are the flags a gRPC client command needs for TLS or mTLS.
type clientTLSFlags struct {
	ca, cert, key, serverName string
	prefix                    string
}

// register adds --<prefix>tls-ca, --<prefix>tls-cert, --<prefix>tls-key and
// --<prefix>tls-server-name.
func (f *clientTLSFlags) register(fs *pflag.FlagSet, prefix string) {
	f.prefix = prefix
	fs.StringVar(&f.ca, prefix+"tls-ca", "", "CA bundle that signs the server's certificate (enables TLS)")
	fs.StringVar(&f.cert, prefix+"tls-cert", "", "client certificate for mTLS (with --"+prefix+"tls-key)")
	fs.StringVar(&f.key, prefix+"tls-key", "", "client private key for mTLS")
	fs.StringVar(&f.serverName, prefix+"tls-server-name", "", "name to verify in the server's certificate (default: the host dialled)")
}

// credentials returns nil when no TLS flag is set (plaintext).
func (f *clientTLSFlags) credentials() (credentials.TransportCredentials, error) {
	cfg, err := f.config()
	if cfg == nil || err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// config returns nil when no TLS flag is set (plaintext).
func (f *clientTLSFlags) config() (*tls.Config, error) {
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, usagef("--%stls-cert and --%stls-key go together", f.prefix, f.prefix)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, usagef("--%stls-ca: %v", f.prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--%stls-ca %s: no PEM certificate found", f.prefix, f.ca)
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usagef("--%stls-cert/--%stls-key: %v", f.prefix, f.prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
