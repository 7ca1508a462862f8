package client_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

func ep(cluster, service, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds, or fails the test after wait.
func eventually(t testing.TB, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %s", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newClient(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitReady(t testing.TB, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

func apply(t testing.TB, r registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := r.Apply(testCtx(t), ops); err != nil {
		t.Fatal(err)
	}
}

func keysOf(eps []endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	sort.Strings(out)
	return out
}

func list(t testing.TB, r registry.Registry, f endpoint.Filter) []endpoint.Endpoint {
	t.Helper()
	eps, err := r.List(testCtx(t), f)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// hosted serves a Registrar on a gRPC server the test can stop and start again on
// the same address without stopping the registrar: a network cut, not a restart.
type hosted struct {
	reg  *registrar.Registrar
	addr string
	srv  *grpc.Server
	opts []grpc.ServerOption
}

func host(t testing.TB, reg *registrar.Registrar, addr string, opts ...grpc.ServerOption) *hosted {
	t.Helper()
	h := &hosted{reg: reg, addr: addr, opts: append(registrar.ServerOptions(nil, nil), opts...)}
	h.start(t)
	t.Cleanup(h.stop)
	return h
}

func (h *hosted) start(t testing.TB) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port of a just-stopped server may take a moment to free
		if lis, err = net.Listen("tcp", h.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	h.srv = grpc.NewServer(h.opts...)
	h.reg.RegisterService(h.srv)
	go func() { _ = h.srv.Serve(lis) }()
}

func (h *hosted) stop() {
	if h.srv != nil {
		h.srv.Stop()
		h.srv = nil
	}
}

// runRegistrar runs a Registrar (without a server) until the test ends.
func runRegistrar(t testing.TB, cfg registrar.Config) *registrar.Registrar {
	t.Helper()
	reg, err := registrar.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = reg.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-reg.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("registrar not ready within 30s")
	}
	return reg
}

// drain collects watch events until none arrives for quiet.
func drain(t testing.TB, ch <-chan registry.Event, quiet time.Duration) []registry.Event {
	t.Helper()
	var out []registry.Event
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-time.After(quiet):
			return out
		}
	}
}

func eventStrings(evs []registry.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s %s", ev.Type, ev.Endpoint.Key())
	}
	return out
}
