package leastprivilege_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestMain(m *testing.M) {
	// nats.go v1.55.0 starts this goroutine on a JetStream context's first async
	// publish; when CleanupPublisher (Registry.Close) runs before it has read its
	// status channel, it reads nil and blocks for ever. The race is nats.go's, not
	// these tests', and costs one goroutine per closed Registry. The other two are a
	// file store that nats-server did not stop on shutdown (seen once in
	// internal/embednats; see its TestMain).
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

// testCtx bounds a test so that a bug fails it instead of hanging it.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shortCtx is the deadline of an operation expected to be refused: NATS drops a
// publish its user may not make without answering, so the refusal surfaces as the
// request's deadline passing.
func shortCtx(t *testing.T) context.Context {
	t.Helper()
	return testCtx(t, 1500*time.Millisecond)
}

func ep(cluster, service, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: address, Port: port, Priority: 1}
}

func withTTL(e endpoint.Endpoint, d time.Duration) endpoint.Endpoint {
	e.TTL = endpoint.TTL(d)
	return e
}

func mustApply(t *testing.T, r registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := r.Apply(testCtx(t, 15*time.Second), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func listKeys(t *testing.T, r registry.Registry, f endpoint.Filter) []string {
	t.Helper()
	eps, err := r.List(testCtx(t, 15*time.Second), f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	return keysOf(eps...)
}

func keysOf(eps ...endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	slices.Sort(out)
	return out
}

func expectList(t *testing.T, r registry.Registry, f endpoint.Filter, want ...endpoint.Endpoint) {
	t.Helper()
	if got, w := listKeys(t, r, f), keysOf(want...); !slices.Equal(got, w) {
		t.Fatalf("List(%+v) = %v, want %v", f, got, w)
	}
}

func watch(t *testing.T, r registry.Registry, f endpoint.Filter) <-chan registry.Event {
	t.Helper()
	w, ok := r.(registry.Watcher)
	if !ok {
		t.Fatalf("%T has no Watch", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := w.Watch(ctx, f)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", f, err)
	}
	return ch
}

// expectEvent receives one event within d and checks its type and key.
func expectEvent(t *testing.T, ch <-chan registry.Event, d time.Duration, typ registry.EventType, want endpoint.Endpoint) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch closed while waiting for %s %s", typ, want.Key())
		}
		if ev.Type != typ || (typ != registry.Synced && ev.Endpoint.Key() != want.Key()) {
			t.Fatalf("got %s %s, want %s %s", ev.Type, ev.Endpoint.Key(), typ, want.Key())
		}
	case <-timer.C:
		t.Fatalf("no %s %s within %s", typ, want.Key(), d)
	}
}

// expectSynced consumes the initial state, exactly want in any order, then Synced.
func expectSynced(t *testing.T, ch <-chan registry.Event, want ...endpoint.Endpoint) {
	t.Helper()
	pending := map[endpoint.Key]bool{}
	for _, e := range want {
		pending[e.Key()] = true
	}
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-ch:
			switch {
			case !ok:
				t.Fatal("watch closed before Synced")
			case ev.Type == registry.Synced && len(pending) == 0:
				return
			case ev.Type == registry.Added && pending[ev.Endpoint.Key()]:
				delete(pending, ev.Endpoint.Key())
			default:
				t.Fatalf("initial state: unexpected %s %s (still expecting %d)", ev.Type, ev.Endpoint.Key(), len(pending))
			}
		case <-timer.C:
			t.Fatal("no Synced within 15s")
		}
	}
}

// logRecorder is a slog handler's sink that tests can search.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logRecorder) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitLog waits up to d for the log to contain every one of parts on one line.
func (l *logRecorder) waitLog(t *testing.T, d time.Duration, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for line := range strings.Lines(l.String()) {
			if containsAll(line, parts...) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %s; log:\n%s", parts, d, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
