package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestServerRestartLosesNothing: with file storage, every entry survives a server
// restart; the same Registry keeps working once its connection is back, and an open
// watch resyncs without repeating anything and carries on with new changes.
func TestServerRestartLosesNothing(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	srv, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	nc := connect(t, srv.ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	var ops []registry.Op
	for i := range 500 {
		e := ep("prod", serviceName(i%10), "http", ipv4(i), 80+i%3)
		if i%7 == 0 {
			e.TTL = endpoint.Never
		}
		ops = append(ops, registry.Register(e))
	}
	gone := ops[3].Endpoint
	ops = append(ops, registry.Unregister(gone))
	mustApply(t, ctx, r, ops...)
	before := mustList(t, ctx, r, endpoint.Filter{})
	if len(before) != 499 {
		t.Fatalf("before restart List has %d entries, want 499", len(before))
	}
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for ev := nextEvent(t, ch, 10*time.Second); ev.Type != registry.Synced; ev = nextEvent(t, ch, 10*time.Second) {
	}

	opts := srv.Options()
	srv.Shutdown()
	if srv, err = embednats.Start(ctx, opts); err != nil {
		t.Fatalf("restart: %v", err)
	}
	var after []endpoint.Endpoint
	eventually(t, 20*time.Second, "List works after the restart", func() bool {
		after, err = r.List(ctx, endpoint.Filter{})
		return err == nil
	})
	if !slices.EqualFunc(after, before, endpoint.Equal) {
		t.Fatalf("after restart List has %d entries, want the same %d as before", len(after), len(before))
	}
	added := ep("prod", "late", "http", "10.9.9.9", 80)
	eventually(t, 20*time.Second, "Apply works after the restart", func() bool {
		return r.Apply(ctx, []registry.Op{registry.Register(added)}) == nil
	})
	// The watch's consumer died with the server: its next session re-reads the
	// state, and because nothing else changed, the first event is the new entry.
	expectEvent(t, ch, 30*time.Second, registry.Added, added.Key())
	mustApply(t, ctx, r, registry.Unregister(before[0]))
	expectEvent(t, ch, 10*time.Second, registry.Removed, before[0].Key())
}

// TestUndecodableCountedAndLogged: garbage and payloads on foreign subjects are
// skipped by List and Watch, and each reading counts and logs them.
func TestUndecodableCountedAndLogged(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	var logs bytes.Buffer
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "undecodable_total"})
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg, Undecodable: counter,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)
	good := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, ctx, r, registry.Register(good))
	garbageSubj := subj.For(endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 80})
	if _, err := js.Publish(ctx, garbageSubj, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	// Valid JSON for 10.0.0.3, on 10.0.0.4's subject.
	stray, _ := ep("prod", "web", "http", "10.0.0.3", 80).MarshalJSON()
	straySubj := subj.For(endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.4", Port: 80})
	if _, err := js.Publish(ctx, straySubj, stray); err != nil {
		t.Fatal(err)
	}
	got := mustList(t, ctx, r, endpoint.Filter{})
	if len(got) != 1 || got[0].Key() != good.Key() {
		t.Fatalf("List = %v, want only %s", got, good.Key())
	}
	if sbjs.Undecodable(r) != 2 || counterValue(t, counter) != 2 {
		t.Fatalf("after List: Undecodable() = %d, counter = %v; want 2 and 2", sbjs.Undecodable(r), counterValue(t, counter))
	}
	for _, s := range []string{garbageSubj, straySubj, "undecodable"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log does not mention %q:\n%s", s, logs.String())
		}
	}
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Added, good.Key())
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	if sbjs.Undecodable(r) != 4 {
		t.Fatalf("after the watch's initial state Undecodable() = %d, want 4", sbjs.Undecodable(r))
	}
	// A payload already read (and remembered) as good's is still refused on another
	// entry's subject: by the open watch (5) and by List, which also meets the
	// garbage again (7).
	goodBytes, _ := good.MarshalJSON()
	if _, err := js.Publish(ctx, straySubj, goodBytes); err != nil {
		t.Fatal(err)
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Key() != good.Key() {
		t.Fatalf("with good's payload on a foreign subject List = %v, want only good", got)
	}
	eventually(t, 5*time.Second, "watch and List count the misplaced payload", func() bool { return sbjs.Undecodable(r) == 7 })
	// Garbage replacing a live entry takes it away, for List and watchers alike.
	if _, err := js.Publish(ctx, subj.For(good.Key()), []byte("{")); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Removed, good.Key())
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("List after garbage replaced the entry = %v, want none", got)
	}
}

// TestApplyErrorNamesFailedKeys: when the stream rejects some messages of a batch,
// Apply reports exactly those keys and the rest are written.
func TestApplyErrorNamesFailedKeys(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.MaxMsgSize = 1024
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	big := ep("prod", "web", "http", "10.0.0.2", 80)
	big.Annotations = map[string]string{"blob": strings.Repeat("x", 2000)}
	c := ep("prod", "web", "http", "10.0.0.3", 80)
	err = r.Apply(ctx, []registry.Op{registry.Register(a), registry.Register(big), registry.Register(c)})
	var ae *registry.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("Apply = %v, want a *registry.ApplyError", err)
	}
	if len(ae.Failed) != 1 || ae.Failed[0] != big.Key() {
		t.Fatalf("ApplyError.Failed = %v, want only %s", ae.Failed, big.Key())
	}
	got := mustList(t, ctx, r, endpoint.Filter{})
	if len(got) != 2 || got[0].Key() != a.Key() || got[1].Key() != c.Key() {
		t.Fatalf("List = %v, want the two written entries", got)
	}
}

// TestServerDownIsUnavailable: with the server gone, Apply fails every key as
// unavailable (retryable), and List fails the same way, each within its context.
func TestServerDownIsUnavailable(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	srv.Shutdown()
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, b := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80)
	err := r.Apply(actx, []registry.Op{registry.Register(a), registry.Unregister(b)})
	var ae *registry.ApplyError
	if !errors.As(err, &ae) || len(ae.Failed) != 2 || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Apply with the server down = %v, want an ApplyError naming both keys, matching ErrUnavailable", err)
	}
	lctx, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := r.List(lctx, endpoint.Filter{}); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("List with the server down = %v, want ErrUnavailable", err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestResultsAreCallersOwn: endpoints handed out by List and Watch share nothing with
// what the Registry remembers, so a caller editing them changes nothing else.
func TestResultsAreCallersOwn(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Annotations = map[string]string{"team": "edge"}
	mustApply(t, ctx, r, registry.Register(a))
	// The first List decodes for itself; the second hands out the cache's entry.
	mustList(t, ctx, r, endpoint.Filter{})[0].Annotations["team"] = "changed by caller"
	mustList(t, ctx, r, endpoint.Filter{})[0].Annotations["team"] = "changed by caller again"
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, ch, 5*time.Second, registry.Added, a.Key())
	if ev.Endpoint.Annotations["team"] != "edge" {
		t.Fatalf("watch sent %v after a caller edited a List result", ev.Endpoint.Annotations)
	}
	ev.Endpoint.Annotations["team"] = "changed by watcher"
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	// Re-registering the original must not look like a change to the watch.
	mustApply(t, ctx, r, registry.Register(a))
	expectQuiet(t, ch, 300*time.Millisecond)
	if got := mustList(t, ctx, r, endpoint.Filter{}); got[0].Annotations["team"] != "edge" {
		t.Fatalf("List = %v after callers edited earlier results", got[0].Annotations)
	}
}
