package client

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Backend parameters; commands turn each into a flag of the same name.
const (
	ParamAddress     = "registrar-address"
	ParamTLSCA       = "registrar-tls-ca"
	ParamTLSCert     = "registrar-tls-cert"
	ParamTLSKey      = "registrar-tls-key"
	ParamTLSServer   = "registrar-tls-server-name"
	ParamSPIFFE      = "registrar-spiffe-socket"
	ParamTrustDomain = "registrar-server-trust-domain"
	ParamNode        = "registrar-node"
	ParamScoped      = "registrar-scoped"
	ParamOneShot     = "registrar-one-shot"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "registrar",
		Description: "the in-cluster registrar (switchboard registrar) over gRPC: cached reads, pushed updates, batched writes",
		Params: []registry.Param{
			{Name: ParamAddress, Default: "127.0.0.1:9443", Usage: "registrar gRPC address; several comma-separated replicas fail over"},
			{Name: ParamTLSCA, Usage: "CA bundle (PEM) that signed the registrar's certificate; enables TLS"},
			{Name: ParamTLSCert, Usage: "client certificate (PEM) presented to the registrar for mTLS"},
			{Name: ParamTLSKey, Usage: "key (PEM) of --" + ParamTLSCert},
			{Name: ParamTLSServer, Usage: "name to verify the registrar's certificate against (default: the address's host)"},
			{Name: ParamSPIFFE, Usage: "SPIFFE Workload API socket, e.g. unix:///run/spire/agent.sock: mTLS with this workload's SVID"},
			{Name: ParamTrustDomain, Usage: "SPIFFE trust domain the registrar must belong to (default with --" + ParamSPIFFE + ": our own)"},
			{Name: ParamNode, Usage: "node name this agent reports to the registrar (default: the host name)"},
			{Name: ParamScoped, Default: "false", Usage: "hold only the services this process watches or writes, not the whole fleet: the registrar sends just those"},
			{Name: ParamOneShot, Default: "false", Usage: "make single calls and keep no watch stream, failing at once when no registrar answers (register, unregister and lookup set it)"},
		},
		Open: open,
	})
}

func open(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
	opts := Options{Addresses: cfg.Strings(ParamAddress), Node: cfg.String(ParamNode), Logger: cfg.Logger}
	if len(opts.Addresses) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", registry.ErrBadParam, ParamAddress)
	}
	scoped, err := cfg.Bool(ParamScoped)
	if err != nil {
		return nil, err
	}
	opts.Scoped = scoped
	if opts.OneShot, err = cfg.Bool(ParamOneShot); err != nil {
		return nil, err
	}
	files := tlsutil.Files{CA: cfg.String(ParamTLSCA), Cert: cfg.String(ParamTLSCert), Key: cfg.String(ParamTLSKey)}
	socket, td := cfg.String(ParamSPIFFE), cfg.String(ParamTrustDomain)
	var source io.Closer
	switch {
	case socket != "" && (files != tlsutil.Files{}):
		return nil, fmt.Errorf("%w: use either --%s or the --registrar-tls-* files, not both", registry.ErrBadParam, ParamSPIFFE)
	case socket != "":
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		src, err := tlsutil.NewSource(sctx, socket)
		cancel()
		if err != nil {
			return nil, err
		}
		if opts.TLS, err = src.ClientConfig(td); err != nil {
			_ = src.Close()
			return nil, fmt.Errorf("%w: %v", registry.ErrBadParam, err)
		}
		source = src
	case files != tlsutil.Files{} || td != "":
		conf, err := tlsutil.ClientConfig(files, cfg.String(ParamTLSServer), td)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", registry.ErrBadParam, err)
		}
		opts.TLS = conf
	}
	d, err := newDriver(opts)
	if err != nil {
		if source != nil {
			source.Close()
		}
		return nil, err
	}
	d.source = source // released by Close
	return d, nil
}
