package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// tap calls seen with every event a client's watch stream receives, as it comes
// off the wire (before the client applies it).
func tap(seen func(*registrarv1.EndpointEvent)) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		st, err := streamer(ctx, desc, cc, method, opts...)
		return tappedStream{ClientStream: st, seen: seen}, err
	})
}

type tappedStream struct {
	grpc.ClientStream
	seen func(*registrarv1.EndpointEvent)
}

func (s tappedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if ev, ok := m.(*registrarv1.EndpointEvent); ok && err == nil {
		s.seen(ev)
	}
	return err
}

// TestClientAppliesBatches: the client asks for batches, and after changes that
// came in BATCH messages its cache holds what the registrar holds, at the
// registrar's version, with its own writes confirmed persisted.
func TestClientAppliesBatches(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b, BatchInterval: 10 * time.Millisecond})
	var batches, events atomic.Int64
	c := newClient(t, client.Options{Addresses: []string{addr(srv)}, DialOptions: []grpc.DialOption{tap(func(ev *registrarv1.EndpointEvent) {
		if ev.GetType() == registrarv1.EndpointEvent_BATCH {
			batches.Add(1)
			events.Add(int64(len(ev.GetEvents())))
		}
	})}})
	waitReady(t, c)

	conn, err := grpc.NewClient(addr(srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	api := registrarv1.NewRegistrarClient(conn)
	// One request of many endpoints: their events wait together, so they come
	// as a BATCH; then, once the client has it, a removal of some of them, another
	// BATCH. (Sent before the client had read the first, the removal's events
	// would wait in the ring with it and leave in the same BATCH: seen under load.)
	var eps []endpoint.Endpoint
	for i := range 50 {
		eps = append(eps, ep("east", "web", fmt.Sprintf("10.8.0.%d", i), 80))
	}
	reg, err := api.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protosOf(eps)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the client has the registrations", func() bool { return client.Token(c) == reg.GetVersion() })
	resp, err := api.UnregisterEndpoint(testCtx(t), &registrarv1.UnregisterEndpointRequest{Endpoints: protosOf(eps[:20])})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the client is at the registrar's version", func() bool { return client.Token(c) == resp.GetVersion() })
	if batches.Load() < 2 || events.Load() != 70 {
		t.Fatalf("the client got %d BATCH messages of %d events, want the 70 changes in at least 2", batches.Load(), events.Load())
	}
	if got, want := keysOf(list(t, c, endpoint.Filter{Service: "web"})), keysOf(eps[20:]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the batches the cache holds %v, want %v", got, want)
	}

	// The client's own write is confirmed by the frontier a later batch carries.
	apply(t, c, registry.Register(ep("east", "own", "10.8.1.1", 80)))
	if _, err := api.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protosOf(eps[:5])}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the client's write is confirmed persisted", func() bool { return client.Unconfirmed(c) == 0 })
}

func protosOf(eps []endpoint.Endpoint) []*registryv1.Endpoint {
	out := make([]*registryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e.ToProto()
	}
	return out
}
