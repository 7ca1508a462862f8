package jetstream_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestOpenByName opens the backend the way commands do, by name with flag-named
// parameters, and uses it.
func TestOpenByName(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	cfg := freshStream()
	r, err := registry.Open(ctx, "jetstream", map[string]string{
		"nats-url": srv.ClientURL(), "stream": cfg.Name, "subject-prefix": cfg.Prefix,
		"storage": "memory", "max-age": "1h", "marker-ttl": "2s", "replicas": "1", "lookup": "direct",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, ctx, r, registry.Register(a))
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Key() != a.Key() {
		t.Fatalf("List = %v, want %s", got, a.Key())
	}
	js := newJS(t, connect(t, srv.ClientURL()))
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	if sc.Storage != jetstream.MemoryStorage || sc.MaxAge != time.Hour || sc.SubjectDeleteMarkerTTL != 2*time.Second {
		t.Errorf("created stream has storage %v, max age %s, marker TTL %s; want memory, 1h, 2s", sc.Storage, sc.MaxAge, sc.SubjectDeleteMarkerTTL)
	}
}

func TestOpenRejectsBadParams(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	url := startServer(t).ClientURL()
	for _, tc := range []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{"replicas": "three"}, "replicas"},
		{map[string]string{"replicas": "6"}, "replicas"},
		{map[string]string{"max-age": "forever"}, "max-age"},
		{map[string]string{"marker-ttl": "500ms"}, "marker-ttl"},
		{map[string]string{"storage": "disk"}, "storage"},
		{map[string]string{"lookup": "magic"}, "lookup"},
		{map[string]string{"watch-rescan": "-1s"}, "watch-rescan"},
		{map[string]string{"watch-rescan": "often"}, "watch-rescan"},
		{map[string]string{"create-stream": "maybe"}, "create-stream"},
		{map[string]string{"subject-prefix": "a.*"}, "prefix"},
		{map[string]string{"stream": "bad.name"}, "stream name"},
		{map[string]string{"nats-tls-cert": "cert.pem"}, "nats-tls-key"},
	} {
		tc.params["nats-url"] = url
		r, err := registry.Open(ctx, "jetstream", tc.params, nil)
		if err == nil {
			r.Close()
			t.Errorf("Open(%v) succeeded", tc.params)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%v) = %q, want the error to name %q", tc.params, err, tc.want)
		}
	}
}

func TestOpenUnreachableIsUnavailable(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	url := srv.ClientURL()
	srv.Shutdown()
	for _, backend := range []string{"jetstream", "nats"} {
		if _, err := registry.Open(ctx, backend, map[string]string{"nats-url": url}, nil); !errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("Open %s on a stopped server = %v, want ErrUnavailable", backend, err)
		}
	}
}

// TestOpenChecksExistingStream: an existing stream is never changed by Open, and one
// that would break the KV semantics is refused with every problem named.
func TestOpenChecksExistingStream(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Name, Subjects: []string{cfg.Prefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg, CreateStream: true, Lookup: sbjs.LookupDirect})
	if err == nil {
		t.Fatal("New accepted a plain stream")
	}
	for _, want := range []string{"max messages per subject", "rollup", "per-message TTL", "delete markers", "direct get", "registry init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	other := freshStream()
	if _, err := sbjs.New(ctx, nc, sbjs.Options{Stream: other}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("New without CreateStream on a missing stream = %v, want stream not found", err)
	}
}

// TestEnsureStream creates the stream with the spec's settings and updates it.
func TestEnsureStream(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	cfg := freshStream()
	params := map[string]string{"nats-url": srv.ClientURL(), "stream": cfg.Name, "subject-prefix": cfg.Prefix, "max-age": "1h"}
	info, err := sbjs.Init(ctx, registry.Config{Params: params})
	if err != nil {
		t.Fatal(err)
	}
	sc := info.Config
	if sc.Name != cfg.Name || len(sc.Subjects) != 1 || sc.Subjects[0] != cfg.Prefix+".>" || sc.MaxMsgsPerSubject != 1 ||
		!sc.AllowRollup || !sc.AllowMsgTTL || sc.SubjectDeleteMarkerTTL != sbjs.DefaultMarkerTTL || !sc.DenyDelete ||
		sc.DenyPurge || !sc.AllowDirect || sc.MaxAge != time.Hour || sc.Replicas != 1 || sc.Storage != jetstream.FileStorage {
		t.Fatalf("created stream config %+v does not match the spec", sc)
	}
	params["max-age"] = "2h"
	plan, err := sbjs.Plan(ctx, registry.Config{Params: params})
	if err != nil || len(plan) != 1 || plan[0] != "max_age: 1h0m0s -> 2h0m0s" {
		t.Errorf("Plan with max-age 2h = %q, %v; want the max_age change alone", plan, err)
	}
	missing := maps.Clone(params)
	missing["stream"], missing["subject-prefix"] = cfg.Name+"_NEW", cfg.Prefix+"new"
	if plan, err := sbjs.Plan(ctx, registry.Config{Params: missing}); err != nil || len(plan) != 1 || !strings.HasPrefix(plan[0], "create stream "+cfg.Name+"_NEW") {
		t.Errorf("Plan for a missing stream = %q, %v; want its creation", plan, err)
	}
	js0 := newJS(t, connect(t, srv.ClientURL()))
	if s, err := js0.Stream(ctx, cfg.Name); err != nil || s.CachedInfo().Config.MaxAge != time.Hour {
		t.Fatalf("after Plan the stream is %v, %v; want it unchanged (max age 1h)", s, err)
	}
	if _, err := js0.Stream(ctx, cfg.Name+"_NEW"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Plan created the missing stream: %v", err)
	}
	if info, err = sbjs.Init(ctx, registry.Config{Params: params}); err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 2*time.Hour {
		t.Errorf("updated max age is %s, want 2h", info.Config.MaxAge)
	}
	js := newJS(t, connect(t, srv.ClientURL()))
	bad := cfg
	bad.Replicas = 6
	if _, err := sbjs.EnsureStream(ctx, js, bad); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("EnsureStream with 6 replicas = %v, want an error naming replicas", err)
	}
	bad = cfg
	bad.Memory = true
	if _, err := sbjs.EnsureStream(ctx, js, bad); err == nil {
		t.Error("EnsureStream changed file storage to memory; the server should refuse")
	}
}

// TestPublisher is the best-effort nats backend: plain publishes without headers that
// a stream captures and the jetstream backend reads; it cannot be read itself.
func TestPublisher(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	reader := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	p, err := registry.Open(ctx, "nats", map[string]string{"nats-url": srv.ClientURL(), "subject-prefix": cfg.Prefix}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.TTL = endpoint.TTL(time.Hour)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, ctx, p, registry.Register(a), registry.Register(b))
	eventually(t, 5*time.Second, "reader sees the published entries", func() bool {
		return len(mustList(t, ctx, reader, endpoint.Filter{})) == 2
	})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)
	// Direct get adds the message's metadata as Nats-Stream etc.; anything else was
	// published.
	for h := range lastMsg(t, ctx, js, cfg.Name, subj.For(a.Key())).Header {
		switch h {
		case "Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp":
		default:
			t.Errorf("best-effort publish carried header %s, want none", h)
		}
	}
	mustApply(t, ctx, p, registry.Unregister(a))
	eventually(t, 5*time.Second, "reader sees the unregister", func() bool {
		got := mustList(t, ctx, reader, endpoint.Filter{})
		return len(got) == 1 && got[0].Key() == b.Key()
	})
	if _, err := p.List(ctx, endpoint.Filter{}); !errors.Is(err, sbjs.ErrWriteOnly) {
		t.Errorf("List = %v, want ErrWriteOnly", err)
	}
	if _, err := p.Watch(ctx, endpoint.Filter{}); !errors.Is(err, registry.ErrNoWatch) {
		t.Errorf("Watch = %v, want ErrNoWatch", err)
	}
	if err := p.Apply(ctx, []registry.Op{registry.Register(endpoint.Endpoint{Service: "x"})}); !errors.Is(err, endpoint.ErrInvalid) {
		t.Errorf("Apply of an invalid endpoint = %v, want ErrInvalid", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Apply(ctx, []registry.Op{registry.Register(b)}); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
}

// TestWriteCapturedByAnotherStreamFails: when the registry's stream is gone and
// another stream captures its subjects, a registration must not report success as if
// it were stored in the registry: Apply fails and names the stream that took it.
func TestWriteCapturedByAnotherStreamFails(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	s := startServer(t)
	nc := connect(t, s.ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	mustApply(t, ctx, r, registry.Register(ep("east", "web", "http", "10.0.0.1", 80)))

	// nats-server removes an account's streams directory, in the background, when
	// its last stream is deleted; a stream created meanwhile fails ("could not
	// create storage directory"). Another stream keeps the directory in use.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Name + "-keep", Subjects: []string{cfg.Name + "-keep"}}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	other := cfg.Name + "-other"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: other, Subjects: []string{cfg.Prefix + ".>"}, AllowRollup: true}); err != nil {
		t.Fatal(err)
	}
	err := r.Apply(ctx, []registry.Op{registry.Register(ep("east", "web", "http", "10.0.0.2", 80))})
	if err == nil {
		t.Fatalf("Apply into subjects captured by stream %s succeeded; want an error", other)
	}
	if !strings.Contains(err.Error(), other) {
		t.Errorf("Apply error %q does not name the stream %s that took the write", err, other)
	}
}

// TestInitKeepsOtherSettings: init over a stream another writer created changes the
// settings the registry needs and no other (its byte limit, compression and duplicate
// window stay), and the dry run lists exactly what init then changes.
func TestInitKeepsOtherSettings(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	cfg := freshStream()
	js := newJS(t, connect(t, srv.ClientURL()))
	theirs := jetstream.StreamConfig{Name: cfg.Name, Subjects: []string{cfg.Prefix + ".>"}, MaxMsgsPerSubject: 1,
		AllowRollup: true, AllowMsgTTL: true, SubjectDeleteMarkerTTL: time.Second, Storage: jetstream.FileStorage,
		MaxBytes: 1 << 20, Compression: jetstream.S2Compression, Duplicates: 5 * time.Second}
	if _, err := js.CreateStream(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	params := map[string]string{"nats-url": srv.ClientURL(), "stream": cfg.Name, "subject-prefix": cfg.Prefix, "max-age": "1h"}
	plan, err := sbjs.Plan(ctx, registry.Config{Params: params})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan {
		for _, other := range []string{"max_bytes", "compression", "duplicate_window"} {
			if strings.HasPrefix(p, other) {
				t.Errorf("the dry run would change %s: %q", other, p)
			}
		}
	}
	if _, err := sbjs.Init(ctx, registry.Config{Params: params}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := s.CachedInfo().Config
	if got.MaxBytes != 1<<20 || got.Compression != jetstream.S2Compression || got.Duplicates != 5*time.Second {
		t.Errorf("init reset another writer's settings: max_bytes %d, compression %v, duplicate_window %s", got.MaxBytes, got.Compression, got.Duplicates)
	}
	if got.MaxAge != time.Hour || !got.AllowDirect || !got.DenyDelete {
		t.Errorf("init did not apply the registry's settings: %+v", got)
	}
	if again, err := sbjs.Plan(ctx, registry.Config{Params: params}); err != nil || len(again) != 0 {
		t.Errorf("a dry run after init = %q, %v; want no changes", again, err)
	}
}
