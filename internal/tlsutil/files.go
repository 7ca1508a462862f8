package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Files names PEM files: a CA bundle, and a certificate with its key.
type Files struct {
	CA, Cert, Key string
}

// ServerConfig returns the server side of TLS from files. Cert and Key are required.
// With CA set, clients must present a certificate it signed (mTLS); with trustDomain
// set as well, that certificate must also carry a SPIFFE ID in the trust domain.
func ServerConfig(f Files, trustDomain string) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a certificate and a key are both required")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: load key pair %s, %s: %w", f.Cert, f.Key, err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CA == "" {
		if trustDomain != "" {
			return nil, errors.New("tls: authorising clients by trust domain needs a client CA")
		}
		return conf, nil
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, err
	}
	conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if trustDomain != "" {
		td, err := spiffeid.TrustDomainFromString(trustDomain)
		if err != nil {
			return nil, fmt.Errorf("tls: trust domain %q: %w", trustDomain, err)
		}
		conf.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("no verified client certificate")
			}
			return memberOf(chains[0][0], td)
		}
	}
	return conf, nil
}

// ClientConfig returns the client side of TLS from files. CA verifies the server
// (empty: the system roots); Cert and Key, when set, are presented for mTLS.
// serverName overrides the name checked against the server's certificate. With
// trustDomain set, the server is checked by its SPIFFE ID instead of its name, as
// SPIFFE peers are.
func ClientConfig(f Files, serverName, trustDomain string) (*tls.Config, error) {
	conf := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a client certificate and its key go together")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: load key pair %s, %s: %w", f.Cert, f.Key, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		conf.RootCAs = pool
	}
	if trustDomain == "" {
		return conf, nil
	}
	if conf.RootCAs == nil {
		return nil, errors.New("tls: authorising the server by trust domain needs a CA")
	}
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, fmt.Errorf("tls: trust domain %q: %w", trustDomain, err)
	}
	roots := conf.RootCAs
	// The chain is still verified, below, against the CA; only the host name check
	// gives way to the SPIFFE ID check.
	conf.InsecureSkipVerify = true
	conf.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		leaf, inter, err := parseChain(raw)
		if err != nil {
			return err
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
			return fmt.Errorf("server certificate: %w", err)
		}
		return memberOf(leaf, td)
	}
	return conf, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

func parseChain(raw [][]byte) (*x509.Certificate, *x509.CertPool, error) {
	if len(raw) == 0 {
		return nil, nil, errors.New("peer sent no certificate")
	}
	inter := x509.NewCertPool()
	var leaf *x509.Certificate
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("peer certificate %d: %w", i, err)
		}
		if i == 0 {
			leaf = c
		} else {
			inter.AddCert(c)
		}
	}
	return leaf, inter, nil
}

// memberOf checks that cert carries a SPIFFE ID in td.
func memberOf(cert *x509.Certificate, td spiffeid.TrustDomain) error {
	id, err := x509svid.IDFromCert(cert)
	if err != nil {
		return fmt.Errorf("peer certificate has no SPIFFE ID: %w", err)
	}
	if !id.MemberOf(td) {
		return fmt.Errorf("peer %s is not in trust domain %s", id, td)
	}
	return nil
}
