package registrar

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// scopedWatch is a WatchEndpointsScoped stream: events in, new sets out.
type scopedWatch struct {
	*rawWatch
	send      func(*registrarv1.WatchEndpointsRequest) error
	closeSend func() error
}

func openScoped(t *testing.T, c registrarv1.RegistrarClient, tok string, id uint64, services ...string) *scopedWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.WatchEndpointsScoped(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := st.Send(&registrarv1.WatchEndpointsRequest{NodeName: "scoped", LastVersion: tok, Services: services, ScopeId: id}); err != nil {
		cancel()
		t.Fatal(err)
	}
	return &scopedWatch{rawWatch: readWatch(t, st.Recv, cancel), send: st.Send, closeSend: st.CloseSend}
}

// change is what a watcher saw of one event, comparable across streams.
type change struct {
	typ     registrarv1.EndpointEvent_EventType
	key     endpoint.Key
	version string
}

func changesUntil(t *testing.T, w *rawWatch, last string) []change {
	t.Helper()
	var out []change
	for {
		ev := w.next(t)
		out = append(out, change{ev.GetType(), keyOf(ev.GetEndpoint()), ev.GetVersion()})
		if ev.GetVersion() == last {
			return out
		}
	}
}

// A scoped stream carries exactly the unscoped stream's events of the services in
// scope, with the same versions, and resumes from its own token the same way.
func TestScopedWatchMatchesUnscoped(t *testing.T) {
	ts := startServer(t, Config{})
	web1, web2 := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80)
	db, cache := ep("east", "db", "10.0.0.3", 5432), ep("east", "cache", "10.0.0.4", 6379)
	register(t, ts, web1, db, cache)

	all := openWatch(t, ts.client, "")
	scoped := openScoped(t, ts.client, "", 1, "web", "db")
	_, _ = all.untilComplete(t)
	parts, done := scoped.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 2 || !got[web1.Key()] || !got[db.Key()] {
		t.Fatalf("scoped snapshot = %v, want only %s and %s", got, web1.Key(), db.Key())
	}
	if done.GetScopeId() != 1 || done.GetResumed() {
		t.Fatalf("SNAPSHOT_COMPLETE scope_id %d resumed %v, want 1 and false", done.GetScopeId(), done.GetResumed())
	}

	steps := func() string {
		register(t, ts, web2)
		c2 := cache
		c2.Weight = 7
		register(t, ts, c2)
		unregister(t, ts, db)
		return unregister(t, ts, web1)
	}
	last := steps()
	want := inScope(changesUntil(t, all, last), "web", "db")
	got := changesUntil(t, scoped.rawWatch, last)
	if !slices.Equal(got, want) {
		t.Fatalf("scoped stream saw %v, want %v", got, want)
	}

	// Resume: a scoped stream reopened from its last token replays the missed
	// changes of its services only, then completes as resumed.
	scoped.cancel()
	register(t, ts, db)
	c3 := cache
	c3.Weight = 9
	register(t, ts, c3)
	last = unregister(t, ts, web2)
	want = inScope(changesUntil(t, all, last), "web", "db")
	again := openScoped(t, ts.client, got[len(got)-1].version, 1, "web", "db")
	replay, done := again.untilComplete(t)
	var gotReplay []change
	for _, ev := range replay {
		gotReplay = append(gotReplay, change{ev.GetType(), keyOf(ev.GetEndpoint()), ev.GetVersion()})
	}
	if !done.GetResumed() || !slices.Equal(gotReplay, want) {
		t.Fatalf("resumed scoped stream replayed %v (resumed %v), want %v resumed", gotReplay, done.GetResumed(), want)
	}
}

func inScope(cs []change, services ...string) []change {
	var out []change
	for _, c := range cs {
		if slices.Contains(services, c.key.Service) {
			out = append(out, c)
		}
	}
	return out
}

// A new set on the same stream is answered with a snapshot of exactly that set,
// marked with its id; changes then follow the new set.
func TestScopedWatchChangesItsSet(t *testing.T) {
	ts := startServer(t, Config{})
	web, db := ep("east", "web", "10.0.0.1", 80), ep("east", "db", "10.0.0.3", 5432)
	register(t, ts, web, db)
	w := openScoped(t, ts.client, "", 1, "web")
	_, _ = w.untilComplete(t)
	if err := w.send(&registrarv1.WatchEndpointsRequest{Services: []string{"db"}, ScopeId: 2}); err != nil {
		t.Fatal(err)
	}
	parts, done := w.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 1 || !got[db.Key()] || done.GetScopeId() != 2 {
		t.Fatalf("snapshot after the new set = %v (scope_id %d), want only %s with scope_id 2", got, done.GetScopeId(), db.Key())
	}
	web2 := web
	web2.Weight = 3
	register(t, ts, web2)
	db2 := db
	db2.Weight = 4
	register(t, ts, db2)
	expectChange(t, w.rawWatch, registrarv1.EndpointEvent_ENDPOINT_UPDATED, db)

	// Back to every service: the snapshot holds both.
	if err := w.send(&registrarv1.WatchEndpointsRequest{AllServices: true, ScopeId: 3}); err != nil {
		t.Fatal(err)
	}
	parts, done = w.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 2 || done.GetScopeId() != 3 {
		t.Fatalf("snapshot of every service = %v (scope_id %d), want 2 endpoints with scope_id 3", got, done.GetScopeId())
	}

	// No services at all: an empty snapshot, and no changes.
	if err := w.send(&registrarv1.WatchEndpointsRequest{ScopeId: 4}); err != nil {
		t.Fatal(err)
	}
	parts, done = w.untilComplete(t)
	if len(parts) != 0 || done.GetScopeId() != 4 {
		t.Fatalf("snapshot of no service = %v (scope_id %d), want none with scope_id 4", parts, done.GetScopeId())
	}
	register(t, ts, web)
	w.quiet(t, 100*time.Millisecond)
}

// A scoped watcher learns the version and persisted frontier of changes it is not
// sent, so its resume token and write confirmations keep moving.
func TestScopedWatchReportsProgressPastOtherServices(t *testing.T) {
	ts := startServer(t, Config{ProgressInterval: 20 * time.Millisecond})
	w := openScoped(t, ts.client, "", 1, "web")
	_, _ = w.untilComplete(t)
	v := register(t, ts, ep("east", "db", "10.0.0.3", 5432))
	want, err := token.Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	untilProgressPast(t, w, want)
}

// The same for changes that reach the registrar from the backend, already
// persisted: no PROGRESS of the persisted frontier follows them, so the scoped
// watcher learns their version only from the events it was not sent.
func TestScopedWatchReportsProgressPastBackendChanges(t *testing.T) {
	m := memory.New()
	defer m.Close()
	ts := startServer(t, Config{Backend: m, ProgressInterval: 20 * time.Millisecond})
	all := openWatch(t, ts.client, "")
	_, _ = all.untilComplete(t)
	w := openScoped(t, ts.client, "", 1, "web")
	_, _ = w.untilComplete(t)
	db := ep("west", "db", "10.5.0.3", 5432)
	if err := m.Apply(testCtx(t), []registry.Op{registry.Register(db)}); err != nil {
		t.Fatal(err)
	}
	want, err := token.Parse(expectChange(t, all, registrarv1.EndpointEvent_ENDPOINT_ADDED, db).GetVersion())
	if err != nil {
		t.Fatal(err)
	}
	untilProgressPast(t, w, want)
}

// untilProgressPast waits for a PROGRESS of w at or past want; w, scoped to web,
// must be sent no event meanwhile.
func untilProgressPast(t *testing.T, w *scopedWatch, want token.Version) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-w.progress:
			got, err := token.Parse(ev.GetVersion())
			if err != nil {
				t.Fatal(err)
			}
			if got.Seq >= want.Seq {
				return
			}
		case ev := <-w.events:
			t.Fatalf("scoped watcher of web was sent %v", ev)
		case <-deadline:
			t.Fatalf("no PROGRESS at or past %s within 20s", want)
		}
	}
}

func TestScopedWatchRejectsBadServiceNames(t *testing.T) {
	ts := startServer(t, Config{})
	w := openScoped(t, ts.client, "", 1, "web", "9bad")
	select {
	case <-w.events:
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end")
	}
	err := <-w.err
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "services[1]") {
		t.Fatalf("err = %v, want InvalidArgument naming services[1]", err)
	}

	// A bad later set ends the stream the same way.
	w = openScoped(t, ts.client, "", 1, "web")
	_, _ = w.untilComplete(t)
	if err := w.send(&registrarv1.WatchEndpointsRequest{Services: []string{"ok", "bad name"}}); err != nil {
		t.Fatal(err)
	}
	for range w.events {
	}
	if err := <-w.err; status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "services[1]") {
		t.Fatalf("err after a bad set = %v, want InvalidArgument naming services[1]", err)
	}
}
