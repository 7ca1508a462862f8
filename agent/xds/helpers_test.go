package xds_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds anything a test waits on that has no tighter requirement.
const wait = 15 * time.Second

// startServer runs an xDS server on 127.0.0.1 until the test ends.
func startServer(t *testing.T) *xds.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := xds.New(ln, xds.Options{})
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

func update(t *testing.T, s *xds.Server, eps ...endpoint.Endpoint) {
	t.Helper()
	eps = append([]endpoint.Endpoint(nil), eps...)
	endpoint.Sort(eps)
	if _, err := s.Update(context.Background(), eps); err != nil {
		t.Fatal(err)
	}
}

func ep(cluster, service, protocol, addr string, port, priority, weight int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: addr, Port: port, Priority: priority, Weight: weight}
}
