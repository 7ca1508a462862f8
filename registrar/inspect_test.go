package registrar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// TestWatcherStaysInItsSizeClass: the watcher struct is what an idle watch
// stream costs beside its goroutine's stack; Status's cursor went into its
// padding, and a field more would move it to the allocator's next size class.
// What Status keeps of each watcher besides stays in its own.
func TestWatcherStaysInItsSizeClass(t *testing.T) {
	var w hub.Watcher
	if n := unsafe.Sizeof(w); n > 224 {
		t.Fatalf("watcher is %d bytes, past the 224-byte size class (benchmarked at ~8 KiB per watcher)", n)
	}
	var info watcherInfo
	if n := unsafe.Sizeof(info); n > 112 {
		t.Fatalf("watcherInfo is %d bytes, past the 112-byte size class", n)
	}
}

// TestChangesDecodesTheRing: Changes returns the ring's changes after a version,
// decoded, in order, in steps of at most max, removals with the endpoint as it
// was; a version the ring no longer holds is refused, and the caller reloads
// with Endpoints, which is at the registrar's version.
func TestChangesDecodesTheRing(t *testing.T) {
	ts := startServer(t, Config{History: 8})
	r := ts.Registrar()
	a, b := ep("east", "web", "10.0.0.1", 80), ep("east", "api", "10.0.0.2", 81)
	a.Node = "n1"
	a2 := a
	a2.Weight = 7
	start := r.Status().Version
	register(t, ts, a)
	register(t, ts, a2)
	register(t, ts, b)
	unregister(t, ts, a)

	var got []Change
	at := start
	for range 10 {
		cs, next, ok := r.Changes(at, 2)
		if !ok {
			t.Fatalf("Changes(%d) refused a version the ring holds", at)
		}
		if len(cs) > 2 || next-at > 2 {
			t.Fatalf("Changes(%d, 2) returned %d changes up to %d", at, len(cs), next)
		}
		got = append(got, cs...)
		if next == at {
			break
		}
		at = next
	}
	want := []struct {
		typ  inspect.ChangeType
		ep   endpoint.Endpoint
		node string
	}{{inspect.Added, a, "n1"}, {inspect.Updated, a2, "n1"}, {inspect.Added, b, ""}, {inspect.Removed, a2, "n1"}}
	if len(got) != len(want) {
		t.Fatalf("got %d changes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		c := got[i]
		if c.Type != w.typ || !endpoint.Equal(c.Endpoint, w.ep) || c.Endpoint.Node != w.node || c.Version <= start {
			t.Errorf("change %d = %v %+v at %d, want %v %+v", i, c.Type, c.Endpoint, c.Version, w.typ, w.ep)
		}
		if i > 0 && c.Version <= got[i-1].Version {
			t.Errorf("change %d at version %d, not after %d", i, c.Version, got[i-1].Version)
		}
	}
	if cs, next, ok := r.Changes(at, 10); !ok || len(cs) != 0 || next != at {
		t.Fatalf("Changes at the current version = %d changes, %d, %v; want none, %d, true", len(cs), next, ok, at)
	}

	registerMany(t, ts, "bulk", 20) // past the ring of 8
	if _, _, ok := r.Changes(start, 10); ok {
		t.Fatal("Changes from a version that fell out of the ring was not refused")
	}
	eps, v := r.Endpoints()
	if len(eps) != 21 || v != r.Status().Version {
		t.Fatalf("Endpoints = %d at %d, want 21 at %d", len(eps), v, r.Status().Version)
	}
	if _, next, ok := r.Changes(v, 10); !ok || next != v {
		t.Fatalf("Changes from Endpoints' version = %d, %v; want %d, true", next, ok, v)
	}
}

// TestStatusReportsWatchers: Status lists each open stream with what its request
// named, its peer and scope, and a lag that returns to 0 once it has what the
// registrar has; a stream resumed from a token is counted as its node's resume,
// and a stream that ended is gone.
func TestStatusReportsWatchers(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.Registrar()
	register(t, ts, ep("east", "web", "10.0.0.1", 80))
	all := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n1", ClusterName: "east"})
	_, done := all.untilComplete(t)
	scoped := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n2", Services: []string{"web", "api"}})
	scoped.untilComplete(t)
	register(t, ts, ep("east", "web", "10.0.0.2", 80))
	all.next(t)

	var st Status
	eventually(t, "both watchers caught up", func() bool {
		st = r.Status()
		return len(st.Watchers) == 2 && st.Watchers[0].Lag == 0 && st.Watchers[1].Lag == 0 &&
			!st.Watchers[0].Snapshot && !st.Watchers[1].Snapshot
	})
	w1, w2 := st.Watchers[0], st.Watchers[1]
	if w1.Node != "n1" || w1.Cluster != "east" || !w1.AllServices || w1.Peer == "" || w1.Since.IsZero() || w1.Resumed {
		t.Errorf("first watcher %+v", w1)
	}
	if w2.Node != "n2" || w2.AllServices || w2.ScopeSize != 2 || fmt.Sprint(w2.Services) != "[api web]" {
		t.Errorf("scoped watcher %+v", w2)
	}
	if st.Cluster != "east" || !st.Ready || st.Counts["east"] != 2 || st.Backend.Kind != "memory" {
		t.Errorf("status %+v", st)
	}

	all.cancel()
	again := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n1", LastVersion: done.GetVersion()})
	again.untilComplete(t)
	eventually(t, "the resumed stream replaces the first", func() bool {
		st = r.Status()
		for _, w := range st.Watchers {
			if w.Node == "n1" {
				return len(st.Watchers) == 2 && w.Resumed && w.Resumes == 1
			}
		}
		return false
	})
	again.cancel()
	scoped.cancel()
	eventually(t, "ended streams leave the status", func() bool { return len(r.Status().Watchers) == 0 })
}

// TestStatusShowsAStalledWatchersLag: a client that opens a stream and never
// reads it stalls its sends once gRPC's flow-control windows are full; its lag
// grows with every change after, while the other watchers stay current.
func TestStatusShowsAStalledWatchersLag(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.Registrar()
	// Fixed windows: no window growth (BDP estimation) while nothing is read.
	conn, err := grpc.NewClient(ts.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "stalled"}); err != nil {
		t.Fatal(err)
	}
	reader := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "reader"})
	reader.untilComplete(t)
	eventually(t, "both streams open", func() bool { return len(r.Status().Watchers) == 2 })

	registerMany(t, ts, "bulk", 3000) // about 400 KB of events
	for range 3000 {
		reader.next(t)
	}
	lagOf := func(node string) uint64 {
		for _, w := range r.Status().Watchers {
			if w.Node == node {
				return w.Lag
			}
		}
		t.Fatalf("no watcher of node %s", node)
		return 0
	}
	eventually(t, "the reader is current", func() bool { return lagOf("reader") == 0 })
	stalled := lagOf("stalled")
	if stalled == 0 {
		t.Fatal("the stalled watcher shows no lag")
	}
	time.Sleep(200 * time.Millisecond)
	if again := lagOf("stalled"); again < stalled {
		t.Fatalf("the stalled watcher's lag fell from %d to %d without reading", stalled, again)
	}
	t.Logf("stalled watcher: %d events behind", stalled)
}

// TestStatusReportsTheBackend: a backend without a change feed is polled; its
// failed reads are counted, with the last error, and the write batches too.
func TestStatusReportsTheBackend(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	ts := startServer(t, Config{Backend: pollOnly{b}, SyncInterval: 20 * time.Millisecond})
	r := ts.Registrar()
	register(t, ts, ep("east", "web", "10.0.0.1", 80))
	eventually(t, "a batch is written", func() bool { return r.Status().Backend.Batches >= 1 })
	st := r.Status().Backend
	if st.Feed || !st.NoFeed || st.LastSync.IsZero() || st.LastError != "" || st.SyncInterval != 20*time.Millisecond {
		t.Fatalf("backend before a failure %+v", st)
	}
	b.failList.Store(true)
	eventually(t, "a failed read is reported", func() bool {
		st = r.Status().Backend
		return st.Errors >= 1 && st.LastError != "" && !st.LastErrorAt.IsZero()
	})
	b.failList.Store(false)
}

// TestUIIsMountedUnlessTurnedOff: the health port serves the page by default,
// and not with NoUI.
func TestUIIsMountedUnlessTurnedOff(t *testing.T) {
	on := startServer(t, Config{})
	if code, body := get(t, on, "/ui"); code != http.StatusOK || !strings.Contains(body, `id="content"`) {
		t.Fatalf("/ui = %d %.200q", code, body)
	}
	off := startServerWith(t, ServerConfig{NoUI: true})
	if code, _ := get(t, off, "/ui"); code != http.StatusNotFound {
		t.Fatalf("/ui with NoUI = %d, want 404", code)
	}
	if code, _ := get(t, off, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with NoUI = %d", code)
	}
}

// TestResumesAreCountedPerClusterAndNode: nodes of two clusters may share a
// name; a resume of one is not the other's.
func TestResumesAreCountedPerClusterAndNode(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.Registrar()
	register(t, ts, ep("east", "web", "10.0.0.1", 80))
	first := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n1", ClusterName: "east"})
	_, done := first.untilComplete(t)
	first.cancel()
	resumed := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n1", ClusterName: "east", LastVersion: done.GetVersion()})
	resumed.untilComplete(t)
	other := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "n1", ClusterName: "west"})
	other.untilComplete(t)
	var st Status
	eventually(t, "both streams open", func() bool {
		st = r.Status()
		return len(st.Watchers) == 2
	})
	for _, w := range st.Watchers {
		if want := map[string]int{"east": 1, "west": 0}[w.Cluster]; w.Resumes != want {
			t.Errorf("watcher of node %s of cluster %q: %d resumes, want %d", w.Node, w.Cluster, w.Resumes, want)
		}
	}
	resumed.cancel()
	other.cancel()
}
