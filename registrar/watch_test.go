package registrar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func register(t *testing.T, ts *testServer, eps ...endpoint.Endpoint) string {
	t.Helper()
	resp, err := ts.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps...)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVersion()
}

func unregister(t *testing.T, ts *testServer, eps ...endpoint.Endpoint) string {
	t.Helper()
	resp, err := ts.client.UnregisterEndpoint(testCtx(t), &registrarv1.UnregisterEndpointRequest{Endpoints: protos(eps...)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVersion()
}

func expectChange(t *testing.T, w *rawWatch, typ registrarv1.EndpointEvent_EventType, want endpoint.Endpoint) *registrarv1.EndpointEvent {
	t.Helper()
	ev := w.next(t)
	if ev.GetType() != typ || keyOf(ev.GetEndpoint()) != want.Key() || ev.GetVersion() == "" {
		t.Fatalf("got %v %v (version %q), want %v %s with a version", ev.GetType(), ev.GetEndpoint(), ev.GetVersion(), typ, want.Key())
	}
	return ev
}

func TestWatchSnapshotThenChanges(t *testing.T) {
	ts := startServer(t, Config{})
	a, b := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80)
	register(t, ts, a, b)
	w := openWatch(t, ts.client, "")
	parts, done := w.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 2 || !got[a.Key()] || !got[b.Key()] || done.GetResumed() {
		t.Fatalf("snapshot = %v (resumed %v), want %s and %s, not resumed", got, done.GetResumed(), a.Key(), b.Key())
	}
	for _, p := range parts {
		if p.GetType() != registrarv1.EndpointEvent_FULL_SNAPSHOT || p.GetVersion() != "" {
			t.Fatalf("snapshot part %v: want FULL_SNAPSHOT without a version", p)
		}
	}
	c := ep("east", "db", "10.0.0.3", 5432)
	register(t, ts, c)
	expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, c)
	c2 := c
	c2.Weight = 9
	register(t, ts, c2)
	if ev := expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_UPDATED, c); ev.GetEndpoint().GetWeight() != 9 {
		t.Fatalf("UPDATED carries weight %d, want 9", ev.GetEndpoint().GetWeight())
	}
	// Re-registering the same value changes nothing and sends nothing.
	register(t, ts, c2)
	unregister(t, ts, a)
	expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_REMOVED, a)
	w.quiet(t, 100*time.Millisecond)
}

func TestEmptySnapshotStillCompletes(t *testing.T) {
	ts := startServer(t, Config{})
	w := openWatch(t, ts.client, "")
	parts, done := w.untilComplete(t)
	if len(parts) != 0 || done.GetVersion() == "" {
		t.Fatalf("empty registrar sent %d parts and version %q, want none and a version", len(parts), done.GetVersion())
	}
}

func TestSnapshotIsChunked(t *testing.T) {
	ts := startServer(t, Config{})
	const n = 3000 // about 250 KiB on the wire: several chunks
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = ep("east", "bulk", fmt.Sprintf("10.1.%d.%d", i/256, i%256), 8080)
	}
	register(t, ts, eps...)
	parts, _ := openWatch(t, ts.client, "").untilComplete(t)
	if got := snapshotKeys(parts); len(got) != n || len(parts) < 2 {
		t.Fatalf("snapshot carried %d endpoints in %d messages, want %d in several", len(got), len(parts), n)
	}
}

func TestResume(t *testing.T) {
	ts := startServer(t, Config{History: 8})
	a, b, c := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80), ep("east", "web", "10.0.0.3", 80)
	register(t, ts, a)
	w := openWatch(t, ts.client, "")
	_, done := w.untilComplete(t)
	tok0 := done.GetVersion()
	w.cancel()

	t.Run("current token sends nothing", func(t *testing.T) {
		w := openWatch(t, ts.client, tok0)
		parts, done := w.untilComplete(t)
		if len(parts) != 0 || !done.GetResumed() || done.GetVersion() != tok0 {
			t.Fatalf("resume at the current version sent %d events, complete %v; want none, resumed at %s", len(parts), done, tok0)
		}
		// ...and then continues with live changes.
		register(t, ts, b)
		expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, b)
		w.cancel()
	})
	t.Run("recent token replays only the missed events", func(t *testing.T) {
		// Since token: b added (previous subtest), c added, a removed.
		register(t, ts, c)
		unregister(t, ts, a)
		w := openWatch(t, ts.client, tok0)
		evs, done := w.untilComplete(t)
		want := []struct {
			typ registrarv1.EndpointEvent_EventType
			key endpoint.Key
		}{
			{registrarv1.EndpointEvent_ENDPOINT_ADDED, b.Key()},
			{registrarv1.EndpointEvent_ENDPOINT_ADDED, c.Key()},
			{registrarv1.EndpointEvent_ENDPOINT_REMOVED, a.Key()},
		}
		if len(evs) != len(want) || !done.GetResumed() {
			t.Fatalf("replay = %v (resumed %v), want %d changes", evs, done.GetResumed(), len(want))
		}
		for i, w := range want {
			if evs[i].GetType() != w.typ || keyOf(evs[i].GetEndpoint()) != w.key {
				t.Fatalf("replay[%d] = %v, want %v %s", i, evs[i], w.typ, w.key)
			}
		}
		if done.GetVersion() != evs[2].GetVersion() {
			t.Fatalf("SNAPSHOT_COMPLETE version %s, want the last replayed %s", done.GetVersion(), evs[2].GetVersion())
		}
		w.cancel()
	})
	fullSnapshot := func(t *testing.T, tok string) {
		t.Helper()
		parts, done := openWatch(t, ts.client, tok).untilComplete(t)
		if got := snapshotKeys(parts); done.GetResumed() || len(got) != 2 || !got[b.Key()] || !got[c.Key()] {
			t.Fatalf("token %q: got %v resumed=%v, want a full snapshot of b and c", tok, got, done.GetResumed())
		}
	}
	t.Run("foreign epoch gets a full snapshot", func(t *testing.T) {
		v, _ := token.Parse(tok0)
		v.Epoch++
		fullSnapshot(t, v.String())
	})
	t.Run("malformed token gets a full snapshot", func(t *testing.T) { fullSnapshot(t, "not-a-token") })
	t.Run("future token gets a full snapshot", func(t *testing.T) {
		v, _ := token.Parse(tok0)
		v.Seq += 1000
		fullSnapshot(t, v.String())
	})
	t.Run("too old a token gets a full snapshot", func(t *testing.T) {
		for i := range 10 { // more changes than the ring holds
			d := ep("east", "tmp", fmt.Sprintf("10.9.0.%d", i), 1)
			register(t, ts, d)
			unregister(t, ts, d)
		}
		fullSnapshot(t, tok0)
	})
}

// A watcher that stops reading falls behind the ring; the others keep up, and once it
// reads again it is resynced with a full snapshot and ends with the right state.
func TestSlowWatcherIsResynced(t *testing.T) {
	ts := startServer(t, Config{History: 64})
	fast := openWatch(t, ts.client, "")
	fast.untilComplete(t)
	slowStream, err := registrarv1.NewRegistrarClient(slowConn(t, ts)).WatchEndpoints(testCtx(t), &registrarv1.WatchEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := slowStream.Recv(); err != nil || ev.GetType() != registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
		t.Fatalf("slow watcher's first event = %v, %v", ev, err)
	}
	// Big annotations fill the slow stream's flow-control window quickly, so its
	// sender really blocks while the fast one is served.
	const n = 400
	burst(t, ts, fast, 2, n)
	// The slow watcher now reads: it must converge to all n endpoints, through a
	// resync, with no event lost.
	state := map[endpoint.Key]bool{}
	sawResync := false
	deadline := time.After(20 * time.Second)
	for len(state) < n {
		select {
		case <-deadline:
			t.Fatalf("slow watcher has %d of %d endpoints after 20s", len(state), n)
		default:
		}
		ev, err := slowStream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetType() {
		case registrarv1.EndpointEvent_FULL_SNAPSHOT:
			if !sawResync {
				clear(state)
			}
			sawResync = true
			for k := range snapshotKeys([]*registrarv1.EndpointEvent{ev}) {
				state[k] = true
			}
		case registrarv1.EndpointEvent_ENDPOINT_ADDED:
			state[keyOf(ev.GetEndpoint())] = true
		}
	}
	if !sawResync {
		t.Fatal("slow watcher converged without a resync, so it never fell behind: the test proves nothing")
	}
	if got := counterValue(t, ts, "registrar_watcher_resyncs_total"); got < 1 {
		t.Fatalf("registrar_watcher_resyncs_total = %v, want >= 1", got)
	}
}

// Writes found in the backend, from any cluster, reach watchers: through the native
// watch when the backend has one, and through polling when it does not.
func TestBackendChangesReachWatchers(t *testing.T) {
	for _, c := range []struct {
		name     string
		backend  func(*registry.Front) registry.Registry
		interval time.Duration
	}{
		{"native watch", func(m *registry.Front) registry.Registry { return m }, time.Hour},
		{"polling", func(m *registry.Front) registry.Registry { return pollOnly{m} }, 20 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := memory.New()
			defer m.Close()
			ts := startServer(t, Config{Backend: c.backend(m), SyncInterval: c.interval})
			w := openWatch(t, ts.client, "")
			w.untilComplete(t)
			west := ep("west", "web", "10.5.0.1", 80)
			if err := m.Apply(testCtx(t), []registry.Op{registry.Register(west)}); err != nil {
				t.Fatal(err)
			}
			expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, west)
			if err := m.Apply(testCtx(t), []registry.Op{registry.Unregister(west)}); err != nil {
				t.Fatal(err)
			}
			expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_REMOVED, west)
			if got := ts.Registrar().Counts()["west"]; got != 0 {
				t.Fatalf("west count %d after removal", got)
			}
		})
	}
}

// Clients that stop reading block the senders sending to them; more of them than
// the senders a burst starts must still not hold up a watcher that reads.
func TestStalledWatchersHoldUpOnlyThemselves(t *testing.T) {
	ts := startServer(t, Config{})
	fast := openWatch(t, ts.client, "")
	fast.untilComplete(t)
	slow := slowConn(t, ts)
	for range hub.BusySenders + 4 {
		st, err := registrarv1.NewRegistrarClient(slow).WatchEndpoints(testCtx(t), &registrarv1.WatchEndpointsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := st.Recv(); err != nil || ev.GetType() != registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
			t.Fatalf("stalled watcher's first event = %v, %v", ev, err)
		}
		// and never reads again
	}
	const n = 200
	// Stalled sends are noticed within two periods of hub.StuckAfter and their
	// senders replaced; held up until something else gives (20 s), the fast
	// watcher would get its events all the same, late.
	start := time.Now()
	burst(t, ts, fast, 3, n)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the fast watcher took %v to get %d events: held up by the stalled ones", d, n)
	}
}

// slowConn is a connection to ts with a small fixed window (no BDP growth), so a
// stream on it that is not read backs up at once.
func slowConn(t *testing.T, ts *testServer) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(ts.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// burst registers n endpoints 10.<net>.x.y with 2,000-byte annotations, which fill a
// stream's flow-control window quickly, and checks that fast gets every one.
func burst(t *testing.T, ts *testServer, fast *rawWatch, net, n int) {
	t.Helper()
	pad := strings.Repeat("x", 2000)
	seen := 0
	for i := range n {
		e := ep("east", "burst", fmt.Sprintf("10.%d.%d.%d", net, i/256, i%256), 80)
		e.Annotations = map[string]string{"pad": pad}
		register(t, ts, e)
		// The fast watcher is kept within the ring: on a busy host the registrations
		// could otherwise outrun its sender by more than History events, and it too
		// would be resynced, which is right but not what this test is about.
		if i%16 == 15 {
			seen = fastAdded(t, fast, seen, i+1)
		}
	}
	fastAdded(t, fast, seen, n)
}

// fastAdded reads the fast watcher's ADDED events from seen up to want.
func fastAdded(t *testing.T, fast *rawWatch, seen, want int) int {
	t.Helper()
	for ; seen < want; seen++ {
		if ev := fast.next(t); ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED {
			t.Fatalf("fast watcher got %v", ev)
		}
	}
	return seen
}

// A watch the client cancels leaves the registrar at once, not at the next event
// sent to it: the sender must notice the stream's end when nothing is sent.
func TestCancelledWatchLeavesWithoutAnEvent(t *testing.T) {
	ts := startServer(t, Config{}) // and nothing registered: no event will come
	plain := openWatch(t, ts.client, "")
	_, _ = plain.untilComplete(t)
	scoped := openScoped(t, ts.client, "", 1, "web")
	_, _ = scoped.untilComplete(t)
	// A scoped stream whose requests ended first: the registrar's reader of them is
	// gone, and only the end of the stream itself can wake the watcher.
	halfClosed := openScoped(t, ts.client, "", 1, "web")
	_, _ = halfClosed.untilComplete(t)
	if err := halfClosed.closeSend(); err != nil {
		t.Fatal(err)
	}
	halfClosed.quiet(t, 100*time.Millisecond) // the half-close ends only the requests
	r := ts.Registrar()
	if n := r.watchers.Load(); n != 3 {
		t.Fatalf("%d watchers open, want 3", n)
	}
	plain.cancel()
	scoped.cancel()
	halfClosed.cancel()
	eventually(t, "every cancelled watcher gone", func() bool { return r.watchers.Load() == 0 })
}
