package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/internal/loopback"
)

// discoveryFlags configure the discovery servers: xDS for Envoy and proxyless gRPC,
// DNS for everything else.
type discoveryFlags struct {
	xdsListen   string
	xdsTLS      xdsTLSFlags
	dnsListen   string
	dnsDomain   string
	dnsTTL      time.Duration
	dnsUpstream string
	// region and zone are the agent's --region and --zone: its DNS answers prefer
	// the endpoints in its zone.
	region, zone string
}

func (d *discoveryFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&d.xdsListen, "xds-listen", "", "serve the registry over xDS (ADS; LDS, RDS, CDS, EDS) on this address for Envoy and proxyless gRPC (empty: off)")
	d.xdsTLS.register(fl)
	fl.StringVar(&d.dnsListen, "dns-listen", "", "answer DNS questions about the registry on this address, UDP and TCP (empty: off)")
	fl.StringVar(&d.dnsDomain, "dns-domain", dns.DefaultDomain, "the DNS domain answered: SERVICE[.CLUSTER].DOMAIN, _SERVICE._PROTOCOL[.CLUSTER].DOMAIN")
	fl.DurationVar(&d.dnsTTL, "dns-ttl", dns.DefaultTTL, "TTL of DNS answers, negative ones included (1s..24h)")
	fl.StringVar(&d.dnsUpstream, "dns-upstream", "", "host:port of a resolver for names outside --dns-domain (empty: refuse them)")
}

func (d discoveryFlags) enabled() bool { return d.xdsListen != "" || d.dnsListen != "" }

func (d discoveryFlags) validate() error {
	for flag, addr := range map[string]string{"xds-listen": d.xdsListen, "dns-listen": d.dnsListen, "dns-upstream": d.dnsUpstream} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return usagef("--%s %q: want host:port (%v)", flag, addr, err)
		}
	}
	if d.xdsListen == "" && d.xdsTLS.set() {
		return usagef("--xds-tls-*, --xds-spiffe-socket and --xds-authorized-trust-domain secure --xds-listen: set it too")
	}
	if err := d.xdsTLS.validate(); err != nil {
		return err
	}
	if _, err := dns.ParseDomain(d.dnsDomain); err != nil {
		return usagef("--dns-domain: %v", err)
	}
	if d.dnsTTL < time.Second || d.dnsTTL > 24*time.Hour {
		return usagef("--dns-ttl %s: want between 1s and 24h", d.dnsTTL)
	}
	return nil
}

// servers opens the discovery servers' listeners; the agent runs them. release frees
// what the servers hold beyond the agent's run (the Workload API connection).
func (d discoveryFlags) servers(ctx context.Context, log *slog.Logger) (out []agent.Server, release func(), err error) {
	release = func() {}
	if d.xdsListen != "" {
		var s agent.Server
		if s, release, err = d.xdsServer(ctx, log); err != nil {
			return nil, release, err
		}
		out = append(out, s)
	}
	if d.dnsListen != "" {
		s, err := d.dnsServer(log)
		if err != nil {
			return nil, release, err
		}
		out = append(out, s)
	}
	return out, release, nil
}

func (d discoveryFlags) xdsServer(ctx context.Context, log *slog.Logger) (agent.Server, func(), error) {
	conf, release, err := d.xdsTLS.config(ctx)
	if err != nil {
		return nil, release, err
	}
	ln, err := net.Listen("tcp", d.xdsListen)
	if err != nil {
		return nil, release, fmt.Errorf("--xds-listen: %w", err)
	}
	warnXDSExposure(log, d.xdsListen, conf)
	o := xds.Options{Logger: log}
	if conf != nil {
		o.GRPCOptions = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(conf))}
	}
	return xds.New(ln, o), release, nil
}

func (d discoveryFlags) dnsServer(log *slog.Logger) (agent.Server, error) {
	pc, ln, err := dns.Listen(d.dnsListen)
	if err != nil {
		return nil, fmt.Errorf("--dns-listen: %w", err)
	}
	s, err := dns.New(pc, ln, dns.Options{Domain: d.dnsDomain, TTL: d.dnsTTL, Upstream: d.dnsUpstream,
		Region: d.region, Zone: d.zone, Logger: log})
	if err != nil {
		return nil, usageError{err}
	}
	if !loopback.Addr(d.dnsListen) {
		log.Warn(fmt.Sprintf("serving DNS on %s, beyond loopback: DNS has no TLS and no client authentication, so anyone who reaches it can enumerate "+
			"the registry's services, clusters and addresses; listen on 127.0.0.1, or limit who can reach the port", d.dnsListen))
	}
	return s, nil
}

// warnXDSExposure warns when clients beyond this machine may read the registry over
// xDS without a certificate: every endpoint of every service, and in plaintext
// anyone on the path may also change what the proxies are told.
func warnXDSExposure(log *slog.Logger, addr string, conf *tls.Config) {
	switch {
	case loopback.Addr(addr) || clientAuth(conf):
	case conf == nil:
		log.Warn(fmt.Sprintf("serving xDS in plaintext on %s: any client that reaches it can read every endpoint in the registry, and anyone on the path "+
			"can change what proxies are told; secure it with --xds-tls-cert, --xds-tls-key and --xds-tls-client-ca (or --xds-spiffe-socket), or listen on 127.0.0.1", addr))
	default:
		log.Warn(fmt.Sprintf("serving xDS without client certificates on %s: any client that reaches it can read every endpoint in the registry; "+
			"require them with --xds-tls-client-ca (or --xds-spiffe-socket), or listen on 127.0.0.1", addr))
	}
}
