package main

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/agent/xds"
)

// discoveryFlags configure the discovery servers: xDS for Envoy and proxyless gRPC,
// DNS for everything else.
type discoveryFlags struct {
	xdsListen   string
	dnsListen   string
	dnsDomain   string
	dnsTTL      time.Duration
	dnsUpstream string
}

func (d *discoveryFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&d.xdsListen, "xds-listen", "", "serve the registry over xDS (ADS; LDS, RDS, CDS, EDS) on this address for Envoy and proxyless gRPC (empty: off)")
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
	if _, err := dns.ParseDomain(d.dnsDomain); err != nil {
		return usagef("--dns-domain: %v", err)
	}
	if d.dnsTTL < time.Second || d.dnsTTL > 24*time.Hour {
		return usagef("--dns-ttl %s: want between 1s and 24h", d.dnsTTL)
	}
	return nil
}

// servers opens the discovery servers' listeners; the agent runs them.
func (d discoveryFlags) servers(log *slog.Logger) ([]agent.Server, error) {
	var out []agent.Server
	if d.xdsListen != "" {
		ln, err := net.Listen("tcp", d.xdsListen)
		if err != nil {
			return nil, fmt.Errorf("--xds-listen: %w", err)
		}
		out = append(out, xds.New(ln, xds.Options{Logger: log}))
	}
	if d.dnsListen != "" {
		pc, ln, err := dns.Listen(d.dnsListen)
		if err != nil {
			return nil, fmt.Errorf("--dns-listen: %w", err)
		}
		s, err := dns.New(pc, ln, dns.Options{Domain: d.dnsDomain, TTL: d.dnsTTL, Upstream: d.dnsUpstream, Logger: log})
		if err != nil {
			return nil, usageError{err}
		}
		out = append(out, s)
	}
	return out, nil
}
