package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func readyClient(t *testing.T, n int) (*client.Client, *registry.Front) {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var ops []registry.Op
	for i := range n {
		ops = append(ops, registry.Register(ep("east", "web", fmt.Sprintf("10.0.%d.%d", i/256, i%256), 8080)))
	}
	ops = append(ops, registry.Register(ep("west", "db", "10.9.0.1", 5432)))
	apply(t, b, ops...)
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b})
	c := newClient(t, client.Options{Addresses: []string{srv.Addr().String()}})
	waitReady(t, c)
	return c, b
}

func TestCachedListIsSharedAndAllocationFree(t *testing.T) {
	c, _ := readyClient(t, 100)
	ctx := context.Background()
	f := endpoint.Filter{Service: "web"}
	first := list(t, c, f)
	if len(first) != 100 || !slices.IsSortedFunc(first, endpoint.Compare) {
		t.Fatalf("List = %d endpoints, sorted %v; want 100 sorted", len(first), slices.IsSortedFunc(first, endpoint.Compare))
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.List(ctx, f); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("cached List allocates %v times per call, want 0", allocs)
	}
	// A change publishes a new slice; a caller's earlier slice is left as it was.
	before := slices.Clone(first)
	apply(t, c, registry.Register(ep("east", "web", "10.0.9.9", 8080)))
	second := list(t, c, f)
	if len(second) != 101 || !slices.EqualFunc(first, before, endpoint.Equal) {
		t.Fatalf("after a write: %d endpoints, earlier slice changed: %v", len(second), !slices.EqualFunc(first, before, endpoint.Equal))
	}
	// Other filters are served from the cache too.
	if got := list(t, c, endpoint.Filter{Cluster: "west"}); len(got) != 1 || got[0].Service != "db" {
		t.Fatalf("List(cluster=west) = %v", got)
	}
	if got := list(t, c, endpoint.Filter{}); len(got) != 102 {
		t.Fatalf("List(all) = %d endpoints, want 102", len(got))
	}
}

func BenchmarkCachedList(b *testing.B) {
	c, _ := readyClient(&testing.T{}, 100)
	ctx := context.Background()
	f := endpoint.Filter{Service: "web"}
	b.ReportAllocs()
	for b.Loop() {
		eps, _ := c.List(ctx, f)
		if len(eps) != 100 {
			b.Fatal(len(eps))
		}
	}
}

// blockWatch holds every WatchEndpoints call until release is closed.
func blockWatch(release <-chan struct{}) grpc.ServerOption {
	return grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		select {
		case <-release:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
		return h(srv, ss)
	})
}

func TestListFallsBackToTheRegistrarBeforeTheStream(t *testing.T) {
	b := memory.New()
	defer b.Close()
	apply(t, b, registry.Register(ep("west", "web", "10.0.0.1", 80)))
	reg := runRegistrar(t, registrar.Config{Cluster: "east", Backend: b})
	release := make(chan struct{})
	h := host(t, reg, "127.0.0.1:0", blockWatch(release))
	c := newClient(t, client.Options{Addresses: []string{h.addr}})
	apply(t, c, registry.Register(ep("east", "web", "10.0.0.2", 80)))
	if got := keysOf(list(t, c, endpoint.Filter{Service: "web"})); len(got) != 2 {
		t.Fatalf("List before the stream = %v, want both endpoints from ListAllEndpoints", got)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(short); err == nil {
		t.Fatal("WaitReady returned before any snapshot could arrive")
	}
	close(release)
	waitReady(t, c)
	if got := keysOf(list(t, c, endpoint.Filter{Service: "web"})); len(got) != 2 {
		t.Fatalf("List from the cache = %v, want both endpoints", got)
	}
}

func TestListBeforeStreamWithRegistrarDown(t *testing.T) {
	c := newClient(t, client.Options{Addresses: []string{"127.0.0.1:1"}, RequestTimeout: 500 * time.Millisecond})
	_, err := c.List(testCtx(t), endpoint.Filter{})
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("List with no registrar and no cache = %v, want ErrUnavailable", err)
	}
	err = c.Apply(testCtx(t), []registry.Op{registry.Register(ep("east", "web", "10.0.0.1", 80))})
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Apply with no registrar = %v, want ErrUnavailable", err)
	}
}

// While the registrar is unreachable the cache keeps serving and ages; once it is
// back, the stream resumes from its token: only the missed change is sent, and a
// local watcher sees it exactly once.
func TestServesStaleCacheThenResumes(t *testing.T) {
	b := memory.New()
	defer b.Close()
	a := ep("east", "web", "10.0.0.1", 80)
	apply(t, b, registry.Register(a))
	metrics := prometheus.NewRegistry()
	reg := runRegistrar(t, registrar.Config{Cluster: "east", Backend: b, Metrics: metrics})
	h := host(t, reg, "127.0.0.1:0")
	c := newClient(t, client.Options{Addresses: []string{h.addr}, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	waitReady(t, c)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := c.Watch(wctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if evs := drain(t, ch, 200*time.Millisecond); len(evs) != 2 || evs[1].Type != registry.Synced {
		t.Fatalf("initial state %v, want a then Synced", eventStrings(evs))
	}
	snapshotsBefore := broadcast(t, metrics, "FULL_SNAPSHOT")

	h.stop()
	added := ep("west", "api", "10.0.0.7", 80)
	apply(t, b, registry.Register(added)) // the registrar sees it; the client cannot
	if got := keysOf(list(t, c, endpoint.Filter{})); !slices.Equal(got, []string{a.Key().String()}) {
		t.Fatalf("List while disconnected = %v, want the last-known-good %s", got, a.Key())
	}
	eventually(t, 10*time.Second, "cache age grows while disconnected", func() bool {
		return gauge(t, c, "agent_registrar_cache_age_seconds") > 0
	})
	eventually(t, 10*time.Second, "reconnect attempts counted", func() bool {
		return gauge(t, c, "agent_registrar_stream_reconnects_total") >= 1
	})

	h.start(t)
	evs := drain(t, ch, 500*time.Millisecond)
	eventually(t, 10*time.Second, "client catches up", func() bool {
		evs = append(evs, drain(t, ch, 50*time.Millisecond)...)
		return len(evs) >= 1
	})
	if got := eventStrings(evs); !slices.Equal(got, []string{"added " + added.Key().String()}) {
		t.Fatalf("after resuming the watcher saw %v, want only the missed addition", got)
	}
	if after := broadcast(t, metrics, "FULL_SNAPSHOT"); after != snapshotsBefore {
		t.Fatalf("the registrar sent a full snapshot on resume (%v endpoints before, %v after)", snapshotsBefore, after)
	}
	eventually(t, 10*time.Second, "cache current again", func() bool { return gauge(t, c, "agent_registrar_cache_age_seconds") == 0 })
}

func broadcast(t *testing.T, reg *prometheus.Registry, typ string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "registrar_event_broadcast_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == typ {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no registrar_event_broadcast_total{type=%q}", typ)
	return 0
}

// gauge reads one of the client's own series through a metrics registry, as an
// agent exporting them would.
func gauge(t *testing.T, c *client.Client, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("client exports no %s", name)
	return 0
}

func TestOpenByName(t *testing.T) {
	b := memory.New()
	defer b.Close()
	apply(t, b, registry.Register(ep("east", "web", "10.0.0.1", 80)))
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b})
	r, err := registry.Open(testCtx(t), "registrar", map[string]string{client.ParamAddress: srv.Addr().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.CanWatch() {
		t.Fatal("the registrar backend opened by name has no change feed")
	}
	if got := list(t, r, endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("List = %v", got)
	}
	for name, params := range map[string]map[string]string{
		"empty address":     {client.ParamAddress: " , "},
		"cert without key":  {client.ParamTLSCert: "/tmp/x.pem"},
		"socket and files":  {client.ParamSPIFFE: "unix:///tmp/x.sock", client.ParamTLSCA: "/tmp/ca.pem"},
		"missing CA file":   {client.ParamTLSCA: "/nonexistent/ca.pem"},
		"unknown parameter": {"registrar-addr": "x:1"},
	} {
		if _, err := registry.Open(testCtx(t), "registrar", params, nil); !errors.Is(err, registry.ErrBadParam) {
			t.Errorf("%s: Open = %v, want ErrBadParam", name, err)
		}
	}
}

// A write the registrar has reported persisted is forgotten: after a registrar
// restart the client does not send it again, so an endpoint removed meanwhile by
// someone else stays removed.
func TestPersistedWritesAreNotResent(t *testing.T) {
	b := memory.New()
	defer b.Close()
	cfg := registrar.Config{Cluster: "east", Backend: b, BatchInterval: 5 * time.Millisecond}
	srv, stop := runServer(t, cfg)
	address := srv.Addr().String()
	c := newClient(t, client.Options{Addresses: []string{address}, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	a := ep("east", "web", "10.0.0.1", 80)
	apply(t, c, registry.Register(a))
	eventually(t, 10*time.Second, "a persisted", func() bool { return srv.Registrar().Pending() == 0 })
	// Any later event carries the frontier past a.
	y := ep("west", "web", "10.0.0.2", 80)
	apply(t, b, registry.Register(y))
	eventually(t, 10*time.Second, "y reaches the client", func() bool { return len(list(t, c, endpoint.Filter{})) == 2 })
	stop()

	apply(t, b, registry.Unregister(a)) // an operator removes a while the registrar is down
	runServerAt(t, address, cfg)
	eventually(t, 10*time.Second, "the client sees a gone", func() bool {
		return slices.Equal(keysOf(list(t, c, endpoint.Filter{})), []string{y.Key().String()})
	})
	time.Sleep(200 * time.Millisecond) // a re-send would have happened by now
	if got := keysOf(list(t, b, endpoint.Filter{})); !slices.Equal(got, []string{y.Key().String()}) {
		t.Fatalf("backend holds %v: the client re-sent a write that was already persisted", got)
	}
}
