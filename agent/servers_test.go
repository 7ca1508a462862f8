package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// The servers' own packages test them fed through Run; this tests Run's rules.

func newDNS(t *testing.T) *dns.Server {
	t.Helper()
	pc, ln, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := dns.New(pc, ln, dns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	return s
}

func TestServersNeedARegistry(t *testing.T) {
	err := Run(context.Background(), Config{Servers: []Server{newDNS(t)}})
	if err == nil || !strings.Contains(err.Error(), "registry backend is required") {
		t.Fatalf("Run without a registry = %v, want it refused", err)
	}
}

// A server that cannot serve (its socket is gone) stops the agent with its error.
func TestAServerThatCannotServeStopsTheAgent(t *testing.T) {
	reg := memory.New()
	defer reg.Close()
	pc, ln, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc.Close()
	ln.Close()
	s, err := dns.New(pc, ln, dns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), Config{Registry: reg, Servers: []Server{s}}); err == nil || !strings.Contains(err.Error(), "dns server") {
		t.Fatalf("Run = %v, want the DNS server's error", err)
	}
}
