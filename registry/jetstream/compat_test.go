package jetstream_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	expectEvent(t, ch, 5*time.Second, registry.Added, a.Key())
	expectEvent(t, ch, 5*time.Second, registry.Added, b.Key())
	// Only now: a removal written before the watch's consumer delivered b's entry
	// replaces it (one message per subject), and the watch rightly never sees b.
	mustApply(t, ctx, r, registry.Unregister(b))
	expectEvent(t, ch, 5*time.Second, registry.Removed, b.Key())
	for _, f := range []endpoint.Filter{{}, {Service: "web"}} {
		if got := mustList(t, ctx, r, f); len(got) != 1 || got[0].Key() != a.Key() {
			t.Fatalf("List(%+v) = %v, want only %s", f, got, a.Key())
		}
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

	// Direct get turned off again under a registry that opened the stream with it:
	// its filtered lookups fall back to the consumer instead of failing.
	ra, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	if got := mustList(t, ctx, ra, endpoint.Filter{Service: "web"}); len(got) != 1 || sbjs.Fallbacks(ra) != 0 {
		t.Fatalf("filtered List with direct get = %v (%d fell back), want %s read by multi_last", got, sbjs.Fallbacks(ra), a.Key())
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	off := s.CachedInfo().Config
	off.AllowDirect = false
	if _, err := js.UpdateStream(ctx, off); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := mustList(t, ctx, ra, endpoint.Filter{Service: "web"}); len(got) != 1 || got[0].Key() != a.Key() {
			t.Fatalf("filtered List after direct get was turned off = %v, want only %s", got, a.Key())
		}
	}
	if n := sbjs.Fallbacks(ra); n != 1 {
		t.Errorf("%d lookups fell back after direct get was turned off, want 1 (then the consumer directly)", n)
	}
}

// TestReadsWhatOthersWrite: entries Switchboard would not write itself but can use —
// an annotation key outside its own rules, a fractional TTL, a null port — are read
// (the TTL cut down to whole seconds, as the server keeps it); entries that cannot be used are counted and
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
	if got[1].Address != "10.0.0.6" || got[1].TTL != endpoint.TTL(time.Second) {
		t.Errorf("entry with TTL 1.5s read as %+v, want TTL 1s, as the server keeps it", got[1])
	}
	if sbjs.Undecodable(r) != 1 || !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "10_0_0_7") {
		t.Errorf("Undecodable() = %d, want 1, logged at debug:\n%s", sbjs.Undecodable(r), logs.String())
	}
}

// TestOtherSubjectShapesIgnored: a full lookup and a watch of everything read the
// whole stream (prefix.>, which the server walks fastest) and must still see only
// entry subjects, prefix.<cluster>.<protocol>.<service>.<address>.<id>, as a
// filter of five wildcards would: anything else under the prefix is neither an entry
// nor undecodable.
func TestOtherSubjectShapesIgnored(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	e := ep("prod", "web", "http", "10.0.0.5", 80)
	mustApply(t, ctx, r, registry.Register(e))
	payload := `{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.9","port":80,"priority":1}`
	id := e.Key().InstanceID()
	for _, subject := range []string{
		cfg.Prefix + ".junk",
		cfg.Prefix + ".prod.http.web.10_0_0_9",
		cfg.Prefix + ".prod.http.web.10_0_0_9." + id + ".extra",
	} {
		publishRaw(t, ctx, js, subject, nil, payload)
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || !endpoint.Equal(got[0], e) {
		t.Errorf("List = %+v, want only %+v", got, e)
	}
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch, 10*time.Second); ev.Type != registry.Added || !endpoint.Equal(ev.Endpoint, e) {
		t.Errorf("first event %v %+v, want Added %+v", ev.Type, ev.Endpoint, e)
	}
	if ev := nextEvent(t, ch, 10*time.Second); ev.Type != registry.Synced {
		t.Errorf("second event %v %+v, want Synced", ev.Type, ev.Endpoint)
	}
	if n := sbjs.Undecodable(r); n != 0 {
		t.Errorf("Undecodable() = %d, want 0: other subjects are not entries", n)
	}
}

// ccmID is the id token another writer (CCM) puts last in an entry's subject: FNV-1a
// 64 over cluster, service, protocol and address, then the port as fmt's %d prints it
// — "%!d(<nil>)" when the port is null. Written out here from the contract, not taken
// from the backend.
func ccmID(cluster, service, protocol, address string, port any) string {
	h := fnv.New64a()
	for _, s := range []string{cluster, service, protocol, address, fmt.Sprintf("%d", port)} {
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// publishRaw writes one message as another writer would: subject, headers and payload
// exactly as given.
func publishRaw(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string, hdr nats.Header, payload string) {
	t.Helper()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: []byte(payload)}); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

func keys(eps []endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	return out
}

// TestIPv6SubjectsKeepColons: an IPv6 entry's address token keeps its colons (only
// dots become '_'), so entries another writer publishes are read and removable, and
// entries the backend writes land where that writer looks. Entries on the dashed
// subjects of earlier versions stay readable and removable.
func TestIPv6SubjectsKeepColons(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	cfg.Memory = true // as foreignStream made it, for EnsureStream below
	p := cfg.Prefix + ".prod.http.web."
	payload := func(addr string) string {
		return `{"cluster":"prod","service":"web","protocol":"http","address":"` + addr + `","port":80,"priority":1}`
	}
	// Another writer's entries: colons kept, including the IPv4-mapped form.
	publishRaw(t, ctx, js, p+"2001:db8::1."+ccmID("prod", "web", "http", "2001:db8::1", 80), nil, payload("2001:db8::1"))
	publishRaw(t, ctx, js, p+"::ffff:10_1_2_3."+ccmID("prod", "web", "http", "::ffff:10.1.2.3", 80), nil, payload("::ffff:10.1.2.3"))
	// An entry an earlier Switchboard wrote: ':' as '-'.
	publishRaw(t, ctx, js, p+"2001-db8--3."+ccmID("prod", "web", "http", "2001:db8::3", 80), nil, payload("2001:db8::3"))

	// First the default lookup on the stream as the other writer made it (no direct
	// get: filtered lookups read through the consumer), then every read path.
	cases := append([]readCase{{"default without direct get", sbjs.LookupConsumer, ""}}, readCases...)
	for i, rc := range cases {
		if i == 1 {
			if _, err := sbjs.EnsureStream(ctx, js, cfg); err != nil { // turns on direct get
				t.Fatal(err)
			}
		}
		r := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		got := mustList(t, ctx, r, endpoint.Filter{})
		if want := []string{"prod/web/http/[::ffff:10.1.2.3]:80", "prod/web/http/[2001:db8::1]:80", "prod/web/http/[2001:db8::3]:80"}; !slices.Equal(keys(got), want) {
			t.Errorf("%s List = %v, want %v", rc.name, keys(got), want)
		}
		for _, addr := range []string{"2001:db8::1", "2001:DB8::3", "::ffff:10.1.2.3"} {
			got := mustList(t, ctx, r, endpoint.Filter{Address: addr})
			if len(got) != 1 || !strings.EqualFold(got[0].Address, addr) {
				t.Errorf("%s List(address %s) = %v", rc.name, addr, keys(got))
			}
		}
		if sbjs.Undecodable(r) != 0 {
			t.Errorf("%s: %d messages undecodable", rc.name, sbjs.Undecodable(r))
		}
		if n := sbjs.Fallbacks(r); n != 0 {
			t.Errorf("%s: %d lookups fell back from multi_last", rc.name, n)
		}
	}

	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	own := ep("prod", "web", "http", "2001:db8::2", 80)
	mustApply(t, ctx, r, registry.Register(own))
	if m := lastMsg(t, ctx, js, cfg.Name, p+"2001:db8::2."+ccmID("prod", "web", "http", "2001:db8::2", 80)); m == nil {
		t.Errorf("registered %s, but nothing is on the subject with the colons kept", own.Key())
	}
	gone := []endpoint.Endpoint{ep("prod", "web", "http", "2001:db8::1", 80), ep("prod", "web", "http", "2001:db8::3", 80), own}
	mustApply(t, ctx, r, registry.Unregister(gone[0]), registry.Unregister(gone[1]), registry.Unregister(gone[2]))
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Address != "::ffff:10.1.2.3" {
		t.Errorf("after unregistering three, List = %v, want only [::ffff:10.1.2.3]:80", keys(got))
	}
	for _, subject := range []string{
		p + "2001:db8::1." + ccmID("prod", "web", "http", "2001:db8::1", 80),
		p + "2001-db8--3." + ccmID("prod", "web", "http", "2001:db8::3", 80),
	} {
		if m := lastMsg(t, ctx, js, cfg.Name, subject); m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "Remove" {
			t.Errorf("after unregister, %s holds %+v, want a removal", subject, m)
		}
	}
}

// TestNullPortEntries: an entry whose port is null — its id token hashes the text
// "%!d(<nil>)" where a port would be — is read with port 0 and removed by an
// unregister of port 0.
func TestNullPortEntries(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subject := cfg.Prefix + ".prod.http.web.10_0_0_9." + ccmID("prod", "web", "http", "10.0.0.9", nil)
	publishRaw(t, ctx, js, subject, nil, `{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.9","port":null,"priority":1}`)
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := ep("prod", "web", "http", "10.0.0.9", 0)
	expectEvent(t, ch, 5*time.Second, registry.Added, want.Key())
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Key() != want.Key() {
		t.Fatalf("List = %v, want %s", keys(got), want.Key())
	}
	mustApply(t, ctx, r, registry.Unregister(want))
	expectEvent(t, ch, 5*time.Second, registry.Removed, want.Key())
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("List after unregister = %v, want none", keys(got))
	}
	if m := lastMsg(t, ctx, js, cfg.Name, subject); m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "Remove" {
		t.Errorf("after unregister, %s holds %+v, want a removal", subject, m)
	}
}

// TestWatchSeesPurges: another writer removes an entry by purging its subject, which
// leaves no marker; the watch's periodic re-read reports it Removed, and reports
// nothing about the entries that stay.
func TestWatchSeesPurges(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg, WatchRescan: 200 * time.Millisecond})
	p := cfg.Prefix + ".prod.http.web."
	foreign := p + "10_0_0_1." + ccmID("prod", "web", "http", "10.0.0.1", 80)
	publishRaw(t, ctx, js, foreign, nil, `{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.1","port":80,"priority":1}`)
	own := ep("prod", "web", "http", "10.0.0.2", 80)
	stays := ep("prod", "web", "http", "10.0.0.3", 80)
	mustApply(t, ctx, r, registry.Register(own), registry.Register(stays))

	ch, err := r.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ev := nextEvent(t, ch, 5*time.Second); ev.Type != registry.Added {
			t.Fatalf("got %s %s, want the three entries Added", ev.Type, ev.Endpoint.Key())
		}
	}
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{foreign, p + "10_0_0_2." + own.InstanceID()} {
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[endpoint.Key]bool{}
	for range 2 {
		ev := nextEvent(t, ch, 5*time.Second)
		if ev.Type != registry.Removed {
			t.Fatalf("got %s %s, want Removed", ev.Type, ev.Endpoint.Key())
		}
		got[ev.Endpoint.Key()] = true
	}
	if !got[own.Key()] || !got[ep("prod", "web", "http", "10.0.0.1", 80).Key()] {
		t.Errorf("Removed %v, want the two purged entries", got)
	}
	expectQuiet(t, ch, time.Second) // several rescans: the entry that stays stays
}

// TestContractReads publishes, raw, the messages the compatibility contract says a
// compliant writer may produce, and checks what a List makes of each: an entry with
// exactly these fields, nothing (a removal), or nothing and a count (unusable).
func TestContractReads(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	cfg.Memory = true                                          // as foreignStream made it
	if _, err := sbjs.EnsureStream(ctx, js, cfg); err != nil { // direct get, for every read path
		t.Fatal(err)
	}
	readers := make([]*registry.Front, len(readCases))
	for i, rc := range readCases {
		readers[i] = openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
	}
	p := cfg.Prefix + "."
	ccm := nats.Header{"Nats-Rollup": {"sub"}, "Nats-Expected-Stream": {cfg.Name}}
	withTTL := func(ttl string) nats.Header {
		h := nats.Header{"Nats-TTL": {ttl}}
		for k, v := range ccm {
			h[k] = v
		}
		return h
	}
	type want struct {
		live *endpoint.Endpoint // nil: not listed
		bad  bool               // counted as undecodable
	}
	var badSoFar uint64
	entry := func(addr string, port int, f func(*endpoint.Endpoint)) want {
		e := ep("prod", "web", "http", addr, port)
		if f != nil {
			f(&e)
		}
		return want{live: &e}
	}
	for _, f := range []struct {
		name, subject string
		hdr           nats.Header
		payload       string
		want          want
	}{
		{"entry with TTL and annotations", p + "prod.http.web.10_0_0_1." + ccmID("prod", "web", "http", "10.0.0.1", 8080), withTTL("30s"),
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.1","port":8080,"priority":1,"annotations":{"team":"edge"},"ttl":"30s"}`,
			entry("10.0.0.1", 8080, func(e *endpoint.Endpoint) {
				e.Annotations = map[string]string{"team": "edge"}
				e.TTL = endpoint.TTL(30 * time.Second)
			})},
		{"TTL in nanoseconds", p + "prod.http.web.10_0_0_2." + ccmID("prod", "web", "http", "10.0.0.2", 8080), withTTL("30s"),
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":8080,"priority":2,"ttl":30000000000}`,
			entry("10.0.0.2", 8080, func(e *endpoint.Endpoint) { e.Priority = 2; e.TTL = endpoint.TTL(30 * time.Second) })},
		{"TTL never, null TTL, unknown keys", p + "prod.http.web.10_0_0_3." + ccmID("prod", "web", "http", "10.0.0.3", 8080), withTTL("never"),
			`{"timestamp":"2026-01-02T03:04:05Z","cluster":"prod","service":"web","protocol":"http","address":"10.0.0.3","port":8080,"priority":255,"ttl":"never","extra":{"a":[1,2]}}`,
			entry("10.0.0.3", 8080, func(e *endpoint.Endpoint) { e.Priority = 255; e.TTL = endpoint.Never })},
		{"no TTL", p + "prod.http.web.10_0_0_4." + ccmID("prod", "web", "http", "10.0.0.4", 8080), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.4","port":8080,"priority":1,"ttl":null}`,
			entry("10.0.0.4", 8080, nil)},
		{"IPv6, colons kept", p + "prod.http.web.2001:db8::5." + ccmID("prod", "web", "http", "2001:db8::5", 443), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"2001:db8::5","port":443,"priority":1}`,
			entry("2001:db8::5", 443, nil)},
		{"IPv6 as another writer spelled it", p + "prod.http.web.2001:DB8:0::8." + ccmID("prod", "web", "http", "2001:DB8:0::8", 443), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"2001:DB8:0::8","port":443,"priority":1}`,
			entry("2001:db8::8", 443, nil)},
		{"null port", p + "prod.http.web.10_0_0_6." + ccmID("prod", "web", "http", "10.0.0.6", nil), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.6","port":null,"priority":1}`,
			entry("10.0.0.6", 0, nil)},
		{"id token trusted", p + "prod.http.web.10_0_0_7.0123456789abcdef", ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.7","port":8080,"priority":1}`,
			entry("10.0.0.7", 8080, nil)},
		{"locality as reserved annotations", p + "prod.http.web.10_0_0_8." + ccmID("prod", "web", "http", "10.0.0.8", 8080), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.8","port":8080,"priority":1,"annotations":{"endpoint.switchboard.dev/health":"draining","endpoint.switchboard.dev/region":"eu-west","endpoint.switchboard.dev/zone":"eu-west-1a","team":"edge"}}`,
			entry("10.0.0.8", 8080, func(e *endpoint.Endpoint) {
				e.Region, e.Zone, e.Health = "eu-west", "eu-west-1a", endpoint.Draining
				e.Annotations = map[string]string{"team": "edge"}
			})},
		{"unknown health, region not a name, top-level locality", p + "prod.http.web.10_0_0_9." + ccmID("prod", "web", "http", "10.0.0.9", 8080), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.9","port":8080,"priority":1,"annotations":{"endpoint.switchboard.dev/health":"quarantined","endpoint.switchboard.dev/region":"eu west"},"zone":"z","health":"draining"}`,
			entry("10.0.0.9", 8080, func(e *endpoint.Endpoint) {
				e.Health = endpoint.Unhealthy
				e.Annotations = map[string]string{"endpoint.switchboard.dev/region": "eu west"}
			})},
		{"server marker, MaxAge", p + "prod.http.web.10_0_1_1." + ccmID("prod", "web", "http", "10.0.1.1", 80), nats.Header{"Nats-Marker-Reason": {"MaxAge"}}, ``, want{}},
		{"server marker, Purge", p + "prod.http.web.10_0_1_2." + ccmID("prod", "web", "http", "10.0.1.2", 80), nats.Header{"Nats-Marker-Reason": {"Purge"}}, ``, want{}},
		{"removal", p + "prod.http.web.10_0_1_3." + ccmID("prod", "web", "http", "10.0.1.3", 80), nats.Header{"Nats-Marker-Reason": {"Remove"}, "Switchboard-Op": {"unregister"}},
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.1.3","port":80,"priority":0}`, want{}},
		{"KV delete", p + "prod.http.web.10_0_1_4." + ccmID("prod", "web", "http", "10.0.1.4", 80), nats.Header{"KV-Operation": {"DEL"}}, ``, want{}},
		{"address token of another entry", p + "prod.http.web.10_0_2_1." + ccmID("prod", "web", "http", "10.0.2.2", 80), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.2.2","port":80,"priority":1}`, want{bad: true}},
		{"service token of another entry", p + "prod.http.api.10_0_2_3." + ccmID("prod", "web", "http", "10.0.2.3", 80), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.2.3","port":80,"priority":1}`, want{bad: true}},
		{"priority out of range", p + "prod.http.web.10_0_2_4." + ccmID("prod", "web", "http", "10.0.2.4", 80), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.2.4","port":80,"priority":256}`, want{bad: true}},
		{"port as a string", p + "prod.http.web.10_0_2_5." + ccmID("prod", "web", "http", "10.0.2.5", "80"), ccm,
			`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.2.5","port":"80","priority":1}`, want{bad: true}},
	} {
		publishRaw(t, ctx, js, f.subject, f.hdr, f.payload)
		if f.want.bad {
			badSoFar++ // every List reads each of them again
		}
		// Every fixture is in cluster prod: a lookup of everything and a filtered
		// one read the same messages, by different paths.
		for i, r := range readers {
			for _, filter := range []endpoint.Filter{{}, {Cluster: "prod"}} {
				before := sbjs.Undecodable(r)
				var got []endpoint.Endpoint
				for _, e := range mustList(t, ctx, r, filter) {
					if f.want.live != nil && e.Key() == f.want.live.Key() {
						got = append(got, e)
					}
				}
				bad := sbjs.Undecodable(r) - before
				switch {
				case f.want.live != nil && (len(got) != 1 || !endpoint.Equal(got[0], *f.want.live)):
					t.Errorf("%s, %s List(%+v): listed %+v, want %+v", f.name, readCases[i].name, filter, got, *f.want.live)
				case bad != badSoFar:
					t.Errorf("%s, %s List(%+v): counted %d undecodable, want %d", f.name, readCases[i].name, filter, bad, badSoFar)
				}
			}
		}
	}
	// Removals and markers are not entries: only the ten live ones are listed.
	for i, r := range readers {
		if got := mustList(t, ctx, r, endpoint.Filter{Service: "web"}); len(got) != 10 {
			t.Errorf("%s List = %v, want the 10 live entries", readCases[i].name, keys(got))
		}
		if n := sbjs.Fallbacks(r); n != 0 {
			t.Errorf("%s: %d lookups fell back from multi_last", readCases[i].name, n)
		}
	}
}

// TestContractWrites checks what the backend publishes — subject, every header,
// payload bytes — against the compatibility contract, written out by hand.
func TestContractWrites(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	sub, err := nc.SubscribeSync(cfg.Prefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what, subject string, hdr nats.Header, payload string) *nats.Msg {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: nothing published: %v", what, err)
		}
		if m.Subject != subject {
			t.Errorf("%s: subject %q, want %q", what, m.Subject, subject)
		}
		if fmt.Sprint(m.Header) != fmt.Sprint(hdr) {
			t.Errorf("%s: headers %v, want %v", what, m.Header, hdr)
		}
		if string(m.Data) != payload {
			t.Errorf("%s: payload\n%s\nwant\n%s", what, m.Data, payload)
		}
		return m
	}
	p := cfg.Prefix + ".prod.http.web."

	full := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 8080,
		Node: "n1", Priority: 1, Weight: 5, Annotations: map[string]string{"zone": "b", "team": "edge"}, TTL: endpoint.TTL(30 * time.Second)}
	mustApply(t, ctx, r, registry.Register(full))
	expect("register", p+"10_0_0_1."+ccmID("prod", "web", "http", "10.0.0.1", 8080),
		nats.Header{"Nats-Rollup": {"sub"}, "Nats-TTL": {"30s"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.1","port":8080,"node":"n1","priority":1,"weight":5,"annotations":{"team":"edge","zone":"b"},"ttl":"30s"}`)

	v6 := ep("prod", "web", "http", "2001:db8::1", 443)
	v6.TTL = endpoint.Never
	mustApply(t, ctx, r, registry.Register(v6))
	expect("register IPv6", p+"2001:db8::1."+ccmID("prod", "web", "http", "2001:db8::1", 443),
		nats.Header{"Nats-Rollup": {"sub"}, "Nats-TTL": {"never"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"2001:db8::1","port":443,"priority":1,"ttl":"never"}`)

	plain := ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, ctx, r, registry.Register(plain))
	expect("register without TTL", p+"10_0_0_2."+ccmID("prod", "web", "http", "10.0.0.2", 80),
		nats.Header{"Nats-Rollup": {"sub"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":80,"priority":1}`)

	// Region, zone and health (when not healthy) as reserved annotations, sorted
	// among the user's; no top-level keys CCM's schema lacks.
	placed := ep("prod", "web", "http", "10.0.0.3", 80)
	placed.Region, placed.Zone, placed.Health = "eu-west", "eu-west-1a", endpoint.Draining
	placed.Annotations = map[string]string{"team": "edge", "app": "x"}
	mustApply(t, ctx, r, registry.Register(placed))
	expect("register with locality", p+"10_0_0_3."+ccmID("prod", "web", "http", "10.0.0.3", 80),
		nats.Header{"Nats-Rollup": {"sub"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.3","port":80,"priority":1,"annotations":{"app":"x","endpoint.switchboard.dev/health":"draining","endpoint.switchboard.dev/region":"eu-west","endpoint.switchboard.dev/zone":"eu-west-1a","team":"edge"}}`)
	placed.Health, placed.Annotations = endpoint.Healthy, nil
	mustApply(t, ctx, r, registry.Register(placed))
	expect("register healthy with locality", p+"10_0_0_3."+ccmID("prod", "web", "http", "10.0.0.3", 80),
		nats.Header{"Nats-Rollup": {"sub"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.3","port":80,"priority":1,"annotations":{"endpoint.switchboard.dev/region":"eu-west","endpoint.switchboard.dev/zone":"eu-west-1a"}}`)

	// The removal replaces the 30s entry: it lives as long (removal.go) and expects
	// the entry's sequence, 1.
	mustApply(t, ctx, r, registry.Unregister(full))
	expect("unregister", p+"10_0_0_1."+ccmID("prod", "web", "http", "10.0.0.1", 8080),
		nats.Header{"Nats-Rollup": {"sub"}, "Nats-Expected-Stream": {cfg.Name}, "Nats-Marker-Reason": {"Remove"},
			"Switchboard-Op": {"unregister"}, "Nats-TTL": {"30s"}, "Nats-Expected-Last-Subject-Sequence": {"1"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.1","port":8080,"priority":0}`)
}

// TestOneKeyOnTwoSubjects: an IPv6 entry an earlier version wrote, then registered
// again by this one, sits on two subjects; readers see one entry, the later, and an
// unregister removes both.
func TestOneKeyOnTwoSubjects(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	p := cfg.Prefix + ".prod.http.web."
	legacy := p + "2001-db8--7." + ccmID("prod", "web", "http", "2001:db8::7", 80)
	publishRaw(t, ctx, js, legacy, nil, `{"cluster":"prod","service":"web","protocol":"http","address":"2001:db8::7","port":80,"priority":1}`)
	ch, err := r.Watch(ctx, endpoint.Filter{Address: "2001:db8::7"})
	if err != nil {
		t.Fatal(err)
	}
	e := ep("prod", "web", "http", "2001:db8::7", 80)
	expectEvent(t, ch, 5*time.Second, registry.Added, e.Key())
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	e.Priority = 9
	mustApply(t, ctx, r, registry.Register(e))
	if ev := expectEvent(t, ch, 5*time.Second, registry.Updated, e.Key()); ev.Endpoint.Priority != 9 {
		t.Errorf("Updated carries priority %d, want 9", ev.Endpoint.Priority)
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 1 || got[0].Priority != 9 {
		t.Fatalf("List = %+v, want the one entry with priority 9", got)
	}
	mustApply(t, ctx, r, registry.Unregister(e))
	expectEvent(t, ch, 5*time.Second, registry.Removed, e.Key())
	expectQuiet(t, ch, 500*time.Millisecond)
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("List after unregister = %v", keys(got))
	}
	if m := lastMsg(t, ctx, js, cfg.Name, legacy); m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "Remove" {
		t.Errorf("after unregister, %s holds %+v, want a removal", legacy, m)
	}
}

// TestReadsNonCanonicalIPv6: another writer (CCM) stores an IPv6 address as it was
// written — `2001:DB8::5`, `2001:0db8:0:0::6` — in the payload and in the subject's
// address token, with an id token that hashes the address as written. Every read
// shows the entry under its canonical key; an unregister of the canonical key, from a
// registry that has read nothing, removes it from the subject it was written on, a
// watcher sees one Removed, and nothing is left to read. A key on two subjects — in
// two spellings, or in another writer's and its own (registered again by Switchboard)
// — reads as one entry, the later one, and an unregister removes both.
func TestReadsNonCanonicalIPv6(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	cfg.Memory = true // as foreignStream made it, for EnsureStream below
	p := cfg.Prefix + ".prod.http.web."
	payload := func(addr, port string) string {
		return `{"cluster":"prod","service":"web","protocol":"http","address":"` + addr + `","port":` + port + `,"priority":1}`
	}
	ccm := nats.Header{"Nats-Rollup": {"sub"}, "Nats-Expected-Stream": {cfg.Name}}
	written := map[string]endpoint.Key{} // the subjects written, with their keys
	for _, w := range []struct {
		addr  string // as written
		port  any    // nil: a null port
		canon endpoint.Key
	}{
		// One key in two spellings: the later one is the entry.
		{"2001:db8:0:0::5", 80, ep("prod", "web", "http", "2001:db8::5", 80).Key()},
		{"2001:DB8::5", 80, ep("prod", "web", "http", "2001:db8::5", 80).Key()},
		{"2001:0db8:0:0::6", nil, ep("prod", "web", "http", "2001:db8::6", 0).Key()},
		{"2001:DB8:0::7", 80, ep("prod", "web", "http", "2001:db8::7", 80).Key()},
	} {
		port := fmt.Sprint(w.port)
		if w.port == nil {
			port = "null"
		}
		subject := p + strings.ReplaceAll(w.addr, ".", "_") + "." + ccmID("prod", "web", "http", w.addr, w.port)
		publishRaw(t, ctx, js, subject, ccm, payload(w.addr, port))
		written[subject] = w.canon
	}
	five := ep("prod", "web", "http", "2001:db8::5", 80)
	six := ep("prod", "web", "http", "2001:db8::6", 0)
	seven := ep("prod", "web", "http", "2001:db8::7", 80)
	want := []string{six.Key().String(), five.Key().String(), seven.Key().String()}
	slices.Sort(want)
	sorted := func(eps []endpoint.Endpoint) []string {
		out := keys(eps)
		slices.Sort(out)
		return out
	}

	// The stream as the other writer made it (no direct get), then every read path.
	cases := append([]readCase{{"default without direct get", sbjs.LookupConsumer, ""}}, readCases...)
	for i, rc := range cases {
		if i == 1 {
			if _, err := sbjs.EnsureStream(ctx, js, cfg); err != nil { // turns on direct get
				t.Fatal(err)
			}
		}
		r := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		for _, f := range []endpoint.Filter{{}, {Service: "web"}, {Cluster: "prod", Protocol: "http"}} {
			if got := sorted(mustList(t, ctx, r, f)); !slices.Equal(got, want) {
				t.Errorf("%s List(%+v) = %v, want %v", rc.name, f, got, want)
			}
		}
		for _, addr := range []string{"2001:db8::5", "2001:DB8::5", "2001:db8:0::5"} {
			for _, f := range []endpoint.Filter{{Address: addr}, {Service: "web", Address: addr}} {
				if got := mustList(t, ctx, r, f); len(got) != 1 || got[0].Key() != five.Key() {
					t.Errorf("%s List(%+v) = %v, want %s", rc.name, f, keys(got), five.Key())
				}
			}
		}
		if n := sbjs.Undecodable(r); n != 0 {
			t.Errorf("%s: %d messages undecodable", rc.name, n)
		}
	}

	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	watches := map[string]<-chan registry.Event{}
	for name, f := range map[string]endpoint.Filter{"everything": {}, "service": {Service: "web"}, "address": {Address: "2001:db8::5"}} {
		ch, err := r.Watch(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		watches[name] = ch
		var added []endpoint.Endpoint
		for ev := nextEvent(t, ch, 5*time.Second); ev.Type != registry.Synced; ev = nextEvent(t, ch, 5*time.Second) {
			if ev.Type != registry.Added {
				t.Fatalf("watch of %s: %s %s before Synced", name, ev.Type, ev.Endpoint.Key())
			}
			added = append(added, ev.Endpoint)
		}
		wantAdded := want
		if name == "address" {
			wantAdded = []string{five.Key().String()}
		}
		if got := sorted(added); !slices.Equal(got, wantAdded) {
			t.Errorf("watch of %s: Added %v, want %v", name, got, wantAdded)
		}
	}

	// Switchboard registers seven again, on its own subject: one entry, the later.
	seven.Priority = 9
	mustApply(t, ctx, r, registry.Register(seven))
	for _, name := range []string{"everything", "service"} {
		if ev := expectEvent(t, watches[name], 5*time.Second, registry.Updated, seven.Key()); ev.Endpoint.Priority != 9 {
			t.Errorf("watch of %s: Updated carries priority %d, want 9", name, ev.Endpoint.Priority)
		}
	}
	if got := mustList(t, ctx, r, endpoint.Filter{Address: "2001:db8::7"}); len(got) != 1 || got[0].Priority != 9 {
		t.Errorf("List(2001:db8::7) = %+v, want the entry registered last", got)
	}

	// A one-shot process (switchboard registry unregister) has read nothing.
	once := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	mustApply(t, ctx, once, registry.Unregister(five), registry.Unregister(six), registry.Unregister(seven))
	for name, ch := range watches {
		gone := map[endpoint.Key]bool{}
		n := 3
		if name == "address" {
			n = 1
		}
		for range n {
			ev := nextEvent(t, ch, 5*time.Second)
			if ev.Type != registry.Removed || gone[ev.Endpoint.Key()] || ev.Endpoint.Address != strings.ToLower(ev.Endpoint.Address) {
				t.Fatalf("watch of %s: %s %s, want each entry Removed once, canonical", name, ev.Type, ev.Endpoint.Key())
			}
			gone[ev.Endpoint.Key()] = true
		}
		expectQuiet(t, ch, 500*time.Millisecond)
	}
	for subject, k := range written {
		if m := lastMsg(t, ctx, js, cfg.Name, subject); m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "Remove" {
			t.Errorf("after unregistering %s, %s holds %+v, want a removal", k, subject, m)
		}
		own := p + sbjs.AddressToken(k.Address) + "." + k.InstanceID()
		if m := lastMsg(t, ctx, js, cfg.Name, own); m != nil && m.Header.Get(jetstream.MarkerReasonHeader) != "Remove" {
			t.Errorf("after unregistering %s, %s holds %+v, want a removal or nothing", k, own, m)
		}
	}
	fresh := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	for _, f := range []endpoint.Filter{{}, {Service: "web"}, {Address: "2001:db8::5"}} {
		if got := mustList(t, ctx, fresh, f); len(got) != 0 {
			t.Errorf("List(%+v) after unregister = %v, want none", f, keys(got))
		}
	}
}

// TestUnregisterWhenAnotherSpellingIsNewer: when the other writer's spelling of a key
// is newer than ours (it re-registered after we did), an unregister shows watchers one
// Removed, never the older entry of ours coming back first.
func TestUnregisterWhenAnotherSpellingIsNewer(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := foreignStream(t, ctx, js)
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	seven := ep("prod", "web", "http", "2001:db8::7", 80)
	seven.Priority = 9
	mustApply(t, ctx, r, registry.Register(seven))
	ch, err := r.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Added, seven.Key())
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	// CCM writes the same key, spelled its way, later: its entry is the one in force.
	const written = "2001:DB8:0::7"
	subject := cfg.Prefix + ".prod.http.web." + written + "." + ccmID("prod", "web", "http", written, 80)
	publishRaw(t, ctx, js, subject, nats.Header{"Nats-Rollup": {"sub"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"`+written+`","port":80,"priority":1}`)
	if ev := expectEvent(t, ch, 5*time.Second, registry.Updated, seven.Key()); ev.Endpoint.Priority != 1 {
		t.Fatalf("Updated carries priority %d, want CCM's 1", ev.Endpoint.Priority)
	}
	once := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	mustApply(t, ctx, once, registry.Unregister(seven))
	expectEvent(t, ch, 5*time.Second, registry.Removed, seven.Key())
	expectQuiet(t, ch, 500*time.Millisecond)
}
