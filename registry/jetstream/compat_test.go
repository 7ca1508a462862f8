package jetstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// The tests in this file hold the backend to the wire contract in docs/backends.md
// ("Compatibility contract") with fixtures written by hand from it and published raw,
// never through the backend's own encoder: what another compliant writer (CCM)
// produces must be read, and what the backend writes must be what the contract says.

// foreignStream creates the stream the way another writer does: the KV settings the
// contract needs, without direct get.
func foreignStream(t *testing.T, ctx context.Context, js jetstream.JetStream) sbjs.StreamConfig {
	t.Helper()
	cfg := freshStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: cfg.Name, Subjects: []string{cfg.Prefix + ".>"}, MaxMsgsPerSubject: 1, MaxAge: time.Hour,
		AllowRollup: true, AllowMsgTTL: true, SubjectDeleteMarkerTTL: time.Minute, DenyDelete: true,
		Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStreamWithoutDirectGet: a stream created without AllowDirect serves every
// command but a direct lookup, which says what is missing; init turns it on and says so.
func TestStreamWithoutDirectGet(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)

	r, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg})
	if err != nil {
		t.Fatalf("open with the default lookup: %v", err)
	}
	defer r.Close()
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	mustApply(t, ctx, r, registry.Register(a), registry.Register(b))
	mustApply(t, ctx, r, registry.Unregister(b))
	expectEvent(t, ch, 5*time.Second, registry.Added, a.Key())
	expectEvent(t, ch, 5*time.Second, registry.Added, b.Key())
	expectEvent(t, ch, 5*time.Second, registry.Removed, b.Key())
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Key() != a.Key() {
		t.Fatalf("List = %v, want only %s", got, a.Key())
	}

	if r, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg, Lookup: sbjs.LookupDirect}); err == nil {
		r.Close()
		t.Fatal("direct lookup opened on a stream without direct get")
	} else if !strings.Contains(err.Error(), "direct get") {
		t.Fatalf("direct lookup on a stream without direct get: %q, want it to name direct get", err)
	}

	var logs bytes.Buffer
	_, err = sbjs.Init(ctx, registry.Config{Params: map[string]string{
		sbjs.ParamURL: srv.ClientURL(), sbjs.ParamStream: cfg.Name, sbjs.ParamPrefix: cfg.Prefix,
		sbjs.ParamStorage: "memory", sbjs.ParamMaxAge: "1h",
	}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	for _, want := range []string{"allow_direct: false -> true"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("init log does not say it changes %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "max_age") {
		t.Errorf("init log names max_age, which it did not change:\n%s", logs.String())
	}
	rd, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg, Lookup: sbjs.LookupDirect})
	if err != nil {
		t.Fatalf("direct lookup after init: %v", err)
	}
	defer rd.Close()
	if got := mustList(t, ctx, rd, endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("direct List after init = %v", got)
	}
}

// TestReadsWhatOthersWrite: entries Switchboard would not write itself but can use —
// an annotation key outside its own rules, a fractional TTL, a null port — are read
// (the TTL rounded up to whole seconds); entries that cannot be used are counted and
// logged at debug, never surfaced.
func TestReadsWhatOthersWrite(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	var logs bytes.Buffer
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	id := func(addr string, port int) string {
		return endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: addr, Port: port}.InstanceID()
	}
	p := cfg.Prefix + ".prod.http.web."
	for _, f := range []struct{ subject, payload string }{
		{p + "10_0_0_5." + id("10.0.0.5", 80),
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.5","port":80,"priority":1,"annotations":{"__meta_x":"1","team":"edge"}}`},
		{p + "10_0_0_6." + id("10.0.0.6", 80),
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.6","port":80,"priority":1,"ttl":"1.5s"}`},
		{p + "10_0_0_7." + id("10.0.0.7", 80), // unusable: no priority
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.7","port":80,"priority":0}`},
	} {
		if _, err := js.Publish(ctx, f.subject, []byte(f.payload)); err != nil {
			t.Fatal(err)
		}
	}
	got := mustList(t, ctx, r, endpoint.Filter{})
	if len(got) != 2 {
		t.Fatalf("List = %+v, want the two usable entries", got)
	}
	if got[0].Address != "10.0.0.5" || got[0].Annotations["__meta_x"] != "1" || got[0].Annotations["team"] != "edge" {
		t.Errorf("entry with a foreign annotation key read as %+v", got[0])
	}
	if got[1].Address != "10.0.0.6" || got[1].TTL != endpoint.TTL(2*time.Second) {
		t.Errorf("entry with TTL 1.5s read as %+v, want TTL 2s", got[1])
	}
	if r.Undecodable() != 1 || !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "10_0_0_7") {
		t.Errorf("Undecodable() = %d, want 1, logged at debug:\n%s", r.Undecodable(), logs.String())
	}
}
