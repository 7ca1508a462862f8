package client_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// TestClientTakesCompressedSnapshots: the client asks for compressed snapshots,
// gets its whole snapshot compressed, and its cache holds every endpoint.
func TestClientTakesCompressedSnapshots(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var ops []registry.Op
	for i := range 2000 {
		ops = append(ops, registry.Register(ep("east", fmt.Sprintf("svc%d", i%7), fmt.Sprintf("10.9.%d.%d", i/200, i%200), 80)))
	}
	apply(t, b, ops...)
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b})
	var compressed, plain atomic.Int64 // parts with frames, endpoints sent as they are
	c := newClient(t, client.Options{Addresses: []string{addr(srv)}, DialOptions: []grpc.DialOption{tap(func(ev *registrarv1.EndpointEvent) {
		if ev.GetType() == registrarv1.EndpointEvent_FULL_SNAPSHOT {
			if len(ev.GetCompressed()) > 0 {
				compressed.Add(1)
			}
			plain.Add(int64(len(ev.GetEndpoints())))
		}
	})}})
	waitReady(t, c)
	if compressed.Load() == 0 || plain.Load() != 0 {
		t.Fatalf("the snapshot came in %d compressed parts and %d uncompressed endpoints", compressed.Load(), plain.Load())
	}
	if got := len(list(t, c, endpoint.Filter{})); got != 2000 {
		t.Fatalf("the cache holds %d endpoints, want 2000", got)
	}
}
