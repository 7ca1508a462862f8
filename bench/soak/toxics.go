package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Slow and lossy links are toxiproxy proxies in the path, run in-process (no
// toxiproxy server, no HTTP API): the soak puts one in front of each registrar for
// the agents, and each registrar child puts one in front of each backend member it
// talks to, in its own namespace, taking its orders on stdin (child.go).

// A toxic is what the nemesis does to a link: the names are the fault kinds'.
type toxic string

const (
	toxicSlow   toxic = "slow"   // 150–900 ms each way, with jitter
	toxicLossy  toxic = "lossy"  // every connection is reset at its first bytes
	toxicNarrow toxic = "narrow" // 16 KiB/s each way
)

// toxicJSON is the toxiproxy definitions of a toxic, one per direction; latency is
// the slow toxic's in milliseconds.
func toxicJSON(t toxic, latency int) ([]string, error) {
	var body string
	switch t {
	case toxicSlow:
		body = fmt.Sprintf(`"type":"latency","attributes":{"latency":%d,"jitter":%d}`, latency, latency/3)
	case toxicLossy:
		body = `"type":"reset_peer","attributes":{"timeout":0}`
	case toxicNarrow:
		body = `"type":"bandwidth","attributes":{"rate":16}`
	default:
		return nil, fmt.Errorf("unknown toxic %q", t)
	}
	var out []string
	for _, dir := range []string{"upstream", "downstream"} {
		out = append(out, fmt.Sprintf(`{"name":"%s_%s","stream":"%s",%s}`, t, dir, dir, body))
	}
	return out, nil
}

// proxies is a set of toxiproxy proxies that get the same toxics.
type proxies struct {
	mu     sync.Mutex
	server *toxiproxy.ApiServer
	list   []*toxiproxy.Proxy
	active map[toxic]bool
}

func newProxies() *proxies {
	return &proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		active: map[toxic]bool{}}
}

// add starts a proxy on listen (host:port; port 0 picks one) to upstream and
// returns the address it listens on.
func (ps *proxies) add(name, listen, upstream string) (string, error) {
	p := toxiproxy.NewProxy(ps.server, name, listen, upstream)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("proxy %s to %s: %w", name, upstream, err)
	}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p.Listen, nil
}

// poison adds toxic t to every proxy; cure removes it.
func (ps *proxies) poison(t toxic, latency int) error {
	defs, err := toxicJSON(t, latency)
	if err != nil {
		return err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.active[t] {
		return nil
	}
	for _, p := range ps.list {
		for _, d := range defs {
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(d)); err != nil {
				return fmt.Errorf("proxy %s: toxic %s: %w", p.Name, t, err)
			}
		}
	}
	ps.active[t] = true
	return nil
}

func (ps *proxies) cure(t toxic) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !ps.active[t] {
		return nil
	}
	for _, p := range ps.list {
		for _, dir := range []string{"upstream", "downstream"} {
			if err := p.Toxics.RemoveToxic(context.Background(), string(t)+"_"+dir); err != nil {
				return fmt.Errorf("proxy %s: toxic %s: %w", p.Name, t, err)
			}
		}
	}
	delete(ps.active, t)
	return nil
}

func (ps *proxies) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.list {
		p.Stop()
	}
	ps.list = nil
}

// toxicCommand parses a child's order: "poison KIND LATENCY" or "cure KIND".
func (ps *proxies) command(line string) error {
	f := strings.Fields(line)
	switch {
	case len(f) == 3 && f[0] == "poison":
		var ms int
		if _, err := fmt.Sscan(f[2], &ms); err != nil {
			return fmt.Errorf("order %q: %w", line, err)
		}
		return ps.poison(toxic(f[1]), ms)
	case len(f) == 2 && f[0] == "cure":
		return ps.cure(toxic(f[1]))
	}
	return fmt.Errorf("order %q: want poison KIND MS or cure KIND", line)
}
