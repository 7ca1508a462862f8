// Package toxictest puts a toxiproxy proxy, in-process, in front of an address for a
// test, and turns its link silent or narrow and back: the partitions and slow links
// of tests that run real servers over real sockets.
//
// It is for tests only, and imports nothing of Switchboard's.
package toxictest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a running proxy; it stops when the test ends.
type Proxy struct {
	t testing.TB
	p *toxiproxy.Proxy
}

var server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

// Start runs a proxy on a free loopback port to upstream (host:port).
func Start(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("proxy %s to %s: %v", name, upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{t: t, p: p}
}

// Addr is where the proxy listens (host:port).
func (p *Proxy) Addr() string { return p.p.Listen }

// BlackHole makes the link silent both ways, for the connections open and those to
// come, without closing any: a partition, as the peers see it.
func (p *Proxy) BlackHole() {
	for _, dir := range []string{"upstream", "downstream"} {
		p.add(fmt.Sprintf(`{"name":"hole_%s","type":"timeout","stream":"%s","attributes":{"timeout":0}}`, dir, dir))
	}
}

// Narrow limits what flows from the upstream to the client to kbps KiB/s.
func (p *Proxy) Narrow(kbps int) {
	p.add(fmt.Sprintf(`{"name":"narrow","type":"bandwidth","stream":"downstream","attributes":{"rate":%d}}`, kbps))
}

// Heal takes every toxic away.
func (p *Proxy) Heal() {
	p.p.Toxics.ResetToxics(context.Background())
}

func (p *Proxy) add(def string) {
	p.t.Helper()
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(def)); err != nil {
		p.t.Fatalf("proxy %s: %v", p.p.Name, err)
	}
}
