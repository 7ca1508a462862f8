package jetstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeNATSBinary()
		os.Exit(code)
	}))
}

// testCtx bounds a test so that a bug fails it instead of hanging it.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startServer runs an embedded nats-server for one test, on a random loopback port
// with its store in a temp dir.
func startServer(t *testing.T) *embednats.Server {
	t.Helper()
	s, err := embednats.Start(testCtx(t, 30*time.Second), embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, url string) *nats.Conn { return connectB(t, url) }

func connectB(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

var streamSeq atomic.Int64

// freshStream names a stream and prefix no other registry in this process uses, so
// registries can share a server.
func freshStream() sbjs.StreamConfig {
	n := streamSeq.Add(1)
	return sbjs.StreamConfig{Name: fmt.Sprintf("T%d", n), Prefix: fmt.Sprintf("t%d.reg", n), MarkerTTL: time.Second}
}

func openRegistry(t *testing.T, nc *nats.Conn, o sbjs.Options) *registry.Front {
	t.Helper()
	if o.Stream.Name == "" {
		o.Stream = freshStream()
	}
	o.CreateStream = true
	r, err := sbjs.New(testCtx(t, 10*time.Second), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func ep(cluster, service, protocol, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: 1}
}

func mustApply(t *testing.T, ctx context.Context, r registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := r.Apply(ctx, ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func mustList(t *testing.T, ctx context.Context, r registry.Registry, f endpoint.Filter) []endpoint.Endpoint {
	t.Helper()
	eps, err := r.List(ctx, f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	return eps
}

// eventually polls cond every 50ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nextEvent receives one event within d.
func nextEvent(t *testing.T, ch <-chan registry.Event, d time.Duration) registry.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no watch event within %s", d)
	}
	return registry.Event{}
}

// expectEvent receives one event and checks its type and key.
func expectEvent(t *testing.T, ch <-chan registry.Event, d time.Duration, typ registry.EventType, want endpoint.Key) registry.Event {
	t.Helper()
	ev := nextEvent(t, ch, d)
	if ev.Type != typ || (typ != registry.Synced && ev.Endpoint.Key() != want) {
		t.Fatalf("got %s %s, want %s %s", ev.Type, ev.Endpoint.Key(), typ, want)
	}
	return ev
}

// expectQuiet checks that no event arrives within d.
func expectQuiet(t *testing.T, ch <-chan registry.Event, d time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event %s %s", ev.Type, ev.Endpoint.Key())
		}
		t.Fatal("watch channel closed")
	case <-time.After(d):
	}
}

// lastMsg reads the raw last message on subject, or nil if there is none.
func lastMsg(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		if err == jetstream.ErrMsgNotFound {
			return nil
		}
		t.Fatalf("get last message on %s: %v", subject, err)
	}
	return m
}

func getenvInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil {
		return def
	}
	return n
}

// testLogger logs through t, so a failing test shows what the backend warned about.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// readCase is one way a List reads the stream; lookup tests run once per case.
type readCase struct {
	name   string
	lookup string // sbjs.LookupConsumer or sbjs.LookupDirect
	path   string // forced read path (sbjs.ReadPaths), or "" for the lookup's own choice
}

// readCases covers every read path: the consumer; multi_last checked against the
// leader (the default for a filtered lookup); --lookup direct, which is multi_last
// unchecked for a filtered lookup and direct get by sequence for the rest; and
// direct get by sequence for every lookup. A forced multi_last falls back where it
// must (more than 1,024 subjects), as the default does.
var readCases = []readCase{
	{"consumer", sbjs.LookupConsumer, "consumer"},
	{"multi_last", sbjs.LookupConsumer, "multi_last"},
	{"direct", sbjs.LookupDirect, ""},
	{"direct-by-seq", sbjs.LookupDirect, "direct"},
}

// openReader opens a registry that reads as rc says.
func openReader(t *testing.T, nc *nats.Conn, o sbjs.Options, rc readCase) *registry.Front {
	t.Helper()
	o.Lookup = rc.lookup
	r := openRegistry(t, nc, o)
	if rc.path != "" {
		sbjs.ForceReadPath(r, rc.path)
	}
	return r
}
