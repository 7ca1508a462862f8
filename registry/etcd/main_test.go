package etcd

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
)

// shared is the one etcd server most tests of this package use; each registry gets
// its own prefix on it.
var shared *embedetcd.Cluster

// benchServer is started on first use by a benchmark, with fsync on.
var (
	benchOnce    sync.Once
	benchCluster *embedetcd.Cluster
	benchErr     error
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedetcd.Start(ctx, embedetcd.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = c
	code := m.Run()
	_ = c.Close()
	if benchCluster != nil {
		_ = benchCluster.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func benchServer(b *testing.B) *embedetcd.Cluster {
	b.Helper()
	benchOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		benchCluster, benchErr = embedetcd.Start(ctx, embedetcd.Options{Fsync: true})
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchCluster
}

var (
	prefixSeq  atomic.Int64
	unsafeChar = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)
)

// uniquePrefix gives every registry a fresh key space on the shared server.
func uniquePrefix(tb testing.TB) string {
	return fmt.Sprintf("/test/%s-%d/", unsafeChar.ReplaceAllString(tb.Name(), "_"), prefixSeq.Add(1))
}

// open returns a registry on the shared server with a fresh prefix, closed when the
// test ends.
func open(tb testing.TB, mods ...func(*Options)) reg {
	tb.Helper()
	o := Options{Endpoints: shared.Endpoints(), Prefix: uniquePrefix(tb)}
	for _, m := range mods {
		m(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return reg{Front: r, driver: r.Driver().(*driver)}
}

// reg is a registry on the test server: the front the tests call, and its driver
// for what they look at behind it.
type reg struct {
	*registry.Front
	*driver
}

func (r reg) Apply(ctx context.Context, ops []registry.Op) error { return r.Front.Apply(ctx, ops) }
func (r reg) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	return r.Front.List(ctx, f)
}
func (r reg) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return r.Front.Watch(ctx, f)
}
func (r reg) Close() error { return r.Front.Close() }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ep(cluster, service, protocol, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: 1}
}

func mustApply(t *testing.T, r registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := r.Apply(testCtx(t), ops); err != nil {
		t.Fatal(err)
	}
}

// revision returns the server's current revision.
func revision(t *testing.T, r reg) int64 {
	t.Helper()
	resp, err := r.client.Get(testCtx(t), "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

const wait = 15 * time.Second

// next receives one event within wait.
func next(t *testing.T, ch <-chan registry.Event) registry.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed early")
		}
		return ev
	case <-time.After(wait):
		t.Fatalf("no watch event within %s", wait)
	}
	return registry.Event{}
}

// expectEvents receives len(want) events and checks their types and full contents,
// in order.
func expectEvents(t *testing.T, ch <-chan registry.Event, want ...registry.Event) {
	t.Helper()
	for i, w := range want {
		got := next(t, ch)
		if got.Type != w.Type || !endpoint.Equal(got.Endpoint, w.Endpoint) {
			t.Fatalf("event %d: got %s %+v, want %s %+v", i, got.Type, got.Endpoint, w.Type, w.Endpoint)
		}
	}
}

// expectQuiet checks that no event arrives for a short while.
func expectQuiet(t *testing.T, ch <-chan registry.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		t.Fatalf("unexpected event %s %s (channel open: %v)", ev.Type, ev.Endpoint.Key(), ok)
	case <-time.After(300 * time.Millisecond):
	}
}

func added(e endpoint.Endpoint) registry.Event {
	return registry.Event{Type: registry.Added, Endpoint: e}
}
func updated(e endpoint.Endpoint) registry.Event {
	return registry.Event{Type: registry.Updated, Endpoint: e}
}
func removed(e endpoint.Endpoint) registry.Event {
	return registry.Event{Type: registry.Removed, Endpoint: e}
}
func synced() registry.Event { return registry.Event{Type: registry.Synced} }
