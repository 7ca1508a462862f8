package dns_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds anything a test waits on that has no tighter requirement.
const wait = 15 * time.Second

// newServer returns a DNS server on a free 127.0.0.1 port (UDP and TCP) that Serve
// has not started.
func newServer(t *testing.T, o dns.Options) *dns.Server {
	t.Helper()
	pc, ln, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := dns.New(pc, ln, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startServer runs a DNS server serving eps until the test ends.
func startServer(t *testing.T, o dns.Options, eps ...endpoint.Endpoint) *dns.Server {
	t.Helper()
	s := newServer(t, o)
	if eps != nil {
		update(t, s, eps...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func update(t *testing.T, s *dns.Server, eps ...endpoint.Endpoint) {
	t.Helper()
	eps = append([]endpoint.Endpoint{}, eps...)
	endpoint.Sort(eps)
	if _, err := s.Update(context.Background(), eps); err != nil {
		t.Fatal(err)
	}
}

// resolver is Go's own resolver, sending every question to s over UDP, and over TCP
// when an answer comes back truncated.
func resolver(s *dns.Server) *net.Resolver {
	addr := s.Addr()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func lookupCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func ep(cluster, service, protocol, addr string, port, priority, weight int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: addr, Port: port, Priority: priority, Weight: weight}
}
