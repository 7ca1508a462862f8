package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Parameter names, which commands turn into flags of the same name.
const (
	ParamEndpoints   = "etcd-endpoints"
	ParamPrefix      = "etcd-prefix"
	ParamCACert      = "etcd-cacert"
	ParamCert        = "etcd-cert"
	ParamKey         = "etcd-key"
	ParamUsername    = "etcd-username"
	ParamPassword    = "etcd-password"
	ParamDialTimeout = "etcd-dial-timeout"
	ParamMaxTxnOps   = "etcd-max-txn-ops"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "etcd",
		Description: "etcd v3 cluster: one transaction per batch, leases for TTLs, native watch",
		Params: []registry.Param{
			{Name: ParamEndpoints, Default: "127.0.0.1:2379", Usage: "etcd client endpoints, comma separated (host:port or http(s)://host:port)"},
			{Name: ParamPrefix, Default: DefaultPrefix, Usage: "etcd key prefix under which endpoints are stored"},
			{Name: ParamCACert, Usage: "PEM file of the CA that signed the etcd servers' certificates (enables TLS)"},
			{Name: ParamCert, Usage: "PEM client certificate for etcd mutual TLS (with --" + ParamKey + ")"},
			{Name: ParamKey, Usage: "PEM client key for etcd mutual TLS (with --" + ParamCert + ")"},
			{Name: ParamUsername, Usage: "etcd user, when etcd auth is enabled (with --" + ParamPassword + ")"},
			{Name: ParamPassword, Usage: "etcd user's password"},
			{Name: ParamDialTimeout, Default: DefaultDialTimeout.String(), Usage: "how long to wait for etcd to answer when opening"},
			{Name: ParamMaxTxnOps, Default: strconv.Itoa(DefaultMaxTxnOps), Usage: "most operations per etcd transaction: the server's --max-txn-ops"},
		},
		Open: func(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
			o, err := optionsFromConfig(cfg)
			if err != nil {
				return nil, err
			}
			return newDriver(ctx, o)
		},
	})
}

// optionsFromConfig turns backend parameters into Options; errors name the
// parameter.
func optionsFromConfig(cfg registry.Config) (Options, error) {
	o := Options{
		Endpoints: cfg.Strings(ParamEndpoints),
		Prefix:    cfg.String(ParamPrefix),
		Username:  cfg.String(ParamUsername),
		Password:  cfg.String(ParamPassword),
		Logger:    cfg.Logger,
	}
	if len(o.Endpoints) == 0 {
		return o, fmt.Errorf("parameter %s: at least one endpoint is required", ParamEndpoints)
	}
	// The etcd client ignores a username without a password, so half a pair would
	// silently connect unauthenticated.
	if (o.Username == "") != (o.Password == "") {
		return o, fmt.Errorf("parameters %s and %s go together: give both or neither", ParamUsername, ParamPassword)
	}
	var err error
	if o.DialTimeout, err = cfg.Duration(ParamDialTimeout); err != nil {
		return o, err
	}
	if o.DialTimeout < 0 {
		return o, fmt.Errorf("parameter %s: %s must be positive", ParamDialTimeout, o.DialTimeout)
	}
	if o.MaxTxnOps, err = cfg.Int(ParamMaxTxnOps); err != nil {
		return o, err
	}
	if o.MaxTxnOps < 0 {
		return o, fmt.Errorf("parameter %s: %d must be positive", ParamMaxTxnOps, o.MaxTxnOps)
	}
	o.TLS, err = tlsConfig(cfg.String(ParamCACert), cfg.String(ParamCert), cfg.String(ParamKey))
	return o, err
}

// tlsConfig builds the client TLS configuration, or nil when no file is given (an
// https:// endpoint then still gets TLS, verified against the system roots).
func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("parameters %s and %s go together: give both or neither", ParamCert, ParamKey)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", ParamCACert, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("parameter %s: %s holds no PEM certificate", ParamCACert, caFile)
		}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("parameters %s/%s: %w", ParamCert, ParamKey, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
