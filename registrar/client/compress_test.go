package client_test

import (
	"context"
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

// partCounter counts the snapshot parts a client's watch stream receives, as they
// come off the wire: compressed ones, and endpoints sent uncompressed.
type partCounter struct{ compressed, plain atomic.Int64 }

func (p *partCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	st, err := streamer(ctx, desc, cc, method, opts...)
	return partStream{ClientStream: st, p: p}, err
}

type partStream struct {
	grpc.ClientStream
	p *partCounter
}

func (s partStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if ev, ok := m.(*registrarv1.EndpointEvent); ok && err == nil && ev.GetType() == registrarv1.EndpointEvent_FULL_SNAPSHOT {
		if len(ev.GetCompressed()) > 0 {
			s.p.compressed.Add(1)
		}
		s.p.plain.Add(int64(len(ev.GetEndpoints())))
	}
	return err
}

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
	var parts partCounter
	c := newClient(t, client.Options{Addresses: []string{addr(srv)},
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(parts.intercept)}})
	waitReady(t, c)
	if parts.compressed.Load() == 0 || parts.plain.Load() != 0 {
		t.Fatalf("the snapshot came in %d compressed parts and %d uncompressed endpoints", parts.compressed.Load(), parts.plain.Load())
	}
	if got := len(list(t, c, endpoint.Filter{})); got != 2000 {
		t.Fatalf("the cache holds %d endpoints, want 2000", got)
	}
}
