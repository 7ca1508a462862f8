package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
)

// xdsTLSFlags secure the agent's xDS server with the flags the registrar's gRPC
// server takes, prefixed --xds-: certificate files, with a client CA for mTLS, or
// SVIDs from the SPIFFE Workload API.
type xdsTLSFlags struct {
	cert, key, clientCA, spiffeSocket, trustDomain string
}

func (x *xdsTLSFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&x.cert, "xds-tls-cert", "", "xDS server certificate (PEM); enables TLS")
	fl.StringVar(&x.key, "xds-tls-key", "", "xDS server key (PEM)")
	fl.StringVar(&x.clientCA, "xds-tls-client-ca", "", "CA bundle (PEM) xDS clients' certificates must chain to: requires mTLS")
	fl.StringVar(&x.spiffeSocket, "xds-spiffe-socket", "", "SPIFFE Workload API socket, e.g. unix:///run/spire/agent.sock: xDS over mTLS with SVIDs")
	fl.StringVar(&x.trustDomain, "xds-authorized-trust-domain", "", "SPIFFE trust domain xDS clients must belong to (default with --xds-spiffe-socket: our own)")
}

func (x xdsTLSFlags) files() tlsutil.Files {
	return tlsutil.Files{CA: x.clientCA, Cert: x.cert, Key: x.key}
}

func (x xdsTLSFlags) set() bool { return x != xdsTLSFlags{} }

// validate refuses combinations that cannot work, before anything starts.
func (x xdsTLSFlags) validate() error {
	switch files := x.files(); {
	case x.spiffeSocket != "" && files != (tlsutil.Files{}):
		return usagef("--xds-spiffe-socket and the --xds-tls-* files are alternatives: use one")
	case files != (tlsutil.Files{}) && (x.cert == "" || x.key == ""):
		return usagef("--xds-tls-cert and --xds-tls-key are both required for TLS")
	case x.trustDomain != "" && x.spiffeSocket == "" && x.clientCA == "":
		return usageError{errors.New("--xds-authorized-trust-domain needs mTLS: set --xds-spiffe-socket or --xds-tls-client-ca")}
	}
	return nil
}

// config builds the xDS server's TLS: SVIDs from the Workload API, certificate files,
// or none (nil: plaintext). release stops watching the Workload API.
func (x xdsTLSFlags) config(ctx context.Context) (conf *tls.Config, release func(), err error) {
	release = func() {}
	switch {
	case x.spiffeSocket != "":
		return x.spiffeConfig(ctx)
	case x.cert != "":
		conf, err := tlsutil.ServerConfig(x.files(), x.trustDomain)
		if err != nil {
			return nil, release, usageError{fmt.Errorf("--xds-tls-cert, --xds-tls-key, --xds-tls-client-ca: %w", err)}
		}
		return conf, release, nil
	}
	return nil, release, nil
}

func (x xdsTLSFlags) spiffeConfig(ctx context.Context) (*tls.Config, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	src, err := tlsutil.NewSource(ctx, x.spiffeSocket)
	if err != nil {
		return nil, func() {}, fmt.Errorf("--xds-spiffe-socket: %w", err)
	}
	conf, err := src.ServerConfig(x.trustDomain)
	if err != nil {
		_ = src.Close()
		return nil, func() {}, usageError{fmt.Errorf("--xds-authorized-trust-domain: %w", err)}
	}
	return conf, func() { _ = src.Close() }, nil
}
