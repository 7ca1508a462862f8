package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestExpiryLeavesMarkerThatNeverSurfaces: a TTL expiry reaches watchers as Removed,
// leaves a server delete marker on the subject, and that marker is neither listed nor
// sent to a new watcher as an entry.
func TestExpiryLeavesMarkerThatNeverSurfaces(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	cfg.MarkerTTL = time.Minute // keep the marker around while we look at it
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)

	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	short := ep("prod", "web", "http", "10.0.0.1", 80)
	short.TTL = endpoint.TTL(time.Second)
	stays := ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, ctx, r, registry.Register(short), registry.Register(stays))
	expectEvent(t, ch, 5*time.Second, registry.Added, short.Key())
	expectEvent(t, ch, 5*time.Second, registry.Added, stays.Key())
	removed := expectEvent(t, ch, 10*time.Second, registry.Removed, short.Key())
	if !endpoint.Equal(removed.Endpoint, short) {
		t.Errorf("Removed carries %+v, want the expired endpoint %+v", removed.Endpoint, short)
	}

	m := lastMsg(t, ctx, js, cfg.Name, subj.For(short.Key()))
	if m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "MaxAge" {
		t.Fatalf("after expiry the subject holds %+v, want a server delete marker (reason MaxAge)", m)
	}
	for _, rc := range readCases {
		rl := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		for _, f := range []endpoint.Filter{{}, {Service: "web"}} {
			if got := mustList(t, ctx, rl, f); len(got) != 1 || got[0].Key() != stays.Key() {
				t.Errorf("%s List(%+v) with a marker present = %v, want only %s", rc.name, f, got, stays.Key())
			}
		}
	}
	ch2, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch2, 5*time.Second, registry.Added, stays.Key())
	expectEvent(t, ch2, 5*time.Second, registry.Synced, endpoint.Key{})
	if sbjs.Undecodable(r) != 0 {
		t.Errorf("markers were counted as undecodable (%d)", sbjs.Undecodable(r))
	}
}

// TestNeverOutlivesMaxAge: MaxAge expires entries without a TTL and caps longer TTLs,
// but a "never" entry survives it.
func TestNeverOutlivesMaxAge(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	cfg := freshStream()
	cfg.MaxAge = 2 * time.Second
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	never := ep("prod", "web", "http", "10.0.0.1", 80)
	never.TTL = endpoint.Never
	unset := ep("prod", "web", "http", "10.0.0.2", 80)
	long := ep("prod", "web", "http", "10.0.0.3", 80)
	long.TTL = endpoint.TTL(time.Hour)
	start := time.Now()
	mustApply(t, ctx, r, registry.Register(never), registry.Register(unset), registry.Register(long))
	eventually(t, 15*time.Second, "entries without never expire at MaxAge", func() bool {
		return len(mustList(t, ctx, r, endpoint.Filter{})) == 1
	})
	// Look again well past MaxAge: the never entry is still there.
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	got := mustList(t, ctx, r, endpoint.Filter{})
	if len(got) != 1 || !endpoint.Equal(got[0], never) {
		t.Fatalf("%s after a 2s MaxAge List = %v, want only the never entry", time.Since(start).Round(time.Millisecond), got)
	}
}

// TestUnregisterReachesWatchers: an explicit unregister is a removal message that
// watchers see once, that expires when the entry it replaced would have, and that
// leaves no second marker behind.
func TestUnregisterReachesWatchers(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream() // marker TTL 1s
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)
	a := ep("prod", "web", "http", "2001:db8::1", 443)
	a.TTL = endpoint.TTL(3 * time.Second)
	mustApply(t, ctx, r, registry.Register(a))

	ch, err := r.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Added, a.Key())
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})
	mustApply(t, ctx, r, registry.Unregister(endpoint.Endpoint{Cluster: a.Cluster, Service: a.Service, Protocol: a.Protocol, Address: a.Address, Port: a.Port}))
	ev := expectEvent(t, ch, 5*time.Second, registry.Removed, a.Key())
	if !endpoint.Equal(ev.Endpoint, a) {
		t.Errorf("Removed carries %+v, want the registered endpoint %+v", ev.Endpoint, a)
	}

	m := lastMsg(t, ctx, js, cfg.Name, subj.For(a.Key()))
	if m == nil {
		t.Fatal("no removal message on the subject")
	}
	for h, want := range map[string]string{
		jetstream.MarkerReasonHeader: "Remove", sbjs.OpHeader: sbjs.OpUnregister,
		jetstream.MsgTTLHeader: "3s", jetstream.MsgRollup: "sub", jetstream.ExpectedStreamHeader: cfg.Name,
	} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("removal header %s = %q, want %q", h, got, want)
		}
	}
	eventually(t, 10*time.Second, "removal expires", func() bool {
		return lastMsg(t, ctx, js, cfg.Name, subj.For(a.Key())) == nil
	})
	// The removal is itself a marker: its expiry must not produce another Removed.
	expectQuiet(t, ch, 1500*time.Millisecond)
	if m := lastMsg(t, ctx, js, cfg.Name, subj.For(a.Key())); m != nil {
		t.Errorf("after the removal expired the subject holds %+v, want nothing", m.Header)
	}
}

// TestDeletesRefusedPurgeAllowed: the stream denies deleting messages (history cannot
// be rewritten behind watchers) but allows purging one subject.
func TestDeletesRefusedPurgeAllowed(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, ctx, r, registry.Register(a), registry.Register(b))
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	m := lastMsg(t, ctx, js, cfg.Name, subj.For(a.Key()))
	if err := s.DeleteMsg(ctx, m.Sequence); err == nil {
		t.Error("DeleteMsg succeeded on a deny-delete stream")
	}
	if err := s.SecureDeleteMsg(ctx, m.Sequence); err == nil {
		t.Error("SecureDeleteMsg succeeded on a deny-delete stream")
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("after refused deletes List = %v, want both entries", got)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj.For(a.Key()))); err != nil {
		t.Fatalf("purging one subject: %v", err)
	}
	got := mustList(t, ctx, r, endpoint.Filter{})
	if len(got) != 1 || got[0].Key() != b.Key() {
		t.Fatalf("after purging %s List = %v, want only %s", a.Key(), got, b.Key())
	}
}

// TestListPastBatchLimit lists more entries than one multi_last direct get may return
// (1,024) by every read path, and watches them: a filtered lookup matching that many
// falls back. SWITCHBOARD_JETSTREAM_LIST_ENTRIES raises the count (e.g. to 100000).
func TestListPastBatchLimit(t *testing.T) {
	n := getenvInt("SWITCHBOARD_JETSTREAM_LIST_ENTRIES", 3000)
	ctx := testCtx(t, 60*time.Second+time.Duration(n)*time.Millisecond)
	nc := connect(t, startServer(t).ClientURL())
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	const services = 30
	want := make([]endpoint.Endpoint, n)
	ops := make([]registry.Op, n)
	for i := range n {
		want[i] = ep("prod", serviceName(i%services), "http", ipv4(i), 8080)
		ops[i] = registry.Register(want[i])
	}
	mustApply(t, ctx, r, ops...) // larger than one Apply's publish window too
	endpoint.Sort(want)
	for _, rc := range readCases {
		rl := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		got := mustList(t, ctx, rl, endpoint.Filter{})
		if !slices.EqualFunc(got, want, endpoint.Equal) {
			t.Errorf("%s List returned %d entries, want all %d in order", rc.name, len(got), n)
		}
		if got := mustList(t, ctx, rl, endpoint.Filter{Cluster: "prod"}); !slices.EqualFunc(got, want, endpoint.Equal) {
			t.Errorf("%s List of the cluster returned %d entries, want all %d in order", rc.name, len(got), n)
		}
		one := mustList(t, ctx, rl, endpoint.Filter{Service: serviceName(7)})
		if wantOne := (n - 7 + services - 1) / services; len(one) != wantOne {
			t.Errorf("%s List of one service returned %d, want %d", rc.name, len(one), wantOne)
		}
	}
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[endpoint.Key]bool{}
	for {
		ev := nextEvent(t, ch, 20*time.Second)
		if ev.Type == registry.Synced {
			break
		}
		if ev.Type != registry.Added || seen[ev.Endpoint.Key()] {
			t.Fatalf("initial state: unexpected %s %s", ev.Type, ev.Endpoint.Key())
		}
		seen[ev.Endpoint.Key()] = true
	}
	if len(seen) != n {
		t.Fatalf("watch sent %d entries before Synced, want %d", len(seen), n)
	}
}

func serviceName(i int) string { return fmt.Sprintf("svc%03d", i) }

func ipv4(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff) }

// TestRemovalOutlivesWhatItReplaces: a removal lives as long as the message it
// replaces could have, so that a server crash which brings that message back never
// outlasts the removal: the marker TTL over an empty subject or a short TTL, the
// entry's TTL over a longer one, the stream's MaxAge (no Nats-TTL) over an entry
// without one, and for ever over a "never" entry or a removal that lives for ever.
func TestRemovalOutlivesWhatItReplaces(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	cfg.MarkerTTL = 5 * time.Second
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subj, _ := sbjs.NewSubjects(cfg.Prefix)
	ttl := func(d time.Duration) endpoint.TTL { return endpoint.TTL(d) }
	for i, tc := range []struct {
		name    string
		entries []endpoint.TTL // registered in turn before the unregister; none: never registered
		twice   bool           // unregister twice
		want    string         // the removal's Nats-TTL; "" for none
	}{
		{"never registered", nil, false, "5s"},
		{"shorter TTL than the marker", []endpoint.TTL{ttl(2 * time.Second)}, false, "5s"},
		{"TTL", []endpoint.TTL{ttl(time.Hour)}, false, "1h0m0s"},
		{"no TTL", []endpoint.TTL{0}, false, ""},
		{"never", []endpoint.TTL{endpoint.Never}, false, "never"},
		{"removed twice", []endpoint.TTL{endpoint.Never}, true, "never"},
		{"last registration counts", []endpoint.TTL{ttl(time.Hour), 0}, false, ""},
	} {
		e := ep("prod", "web", "http", ipv4(i+1), 80)
		for _, tt := range tc.entries {
			e.TTL = tt
			mustApply(t, ctx, r, registry.Register(e))
		}
		mustApply(t, ctx, r, registry.Unregister(e))
		if tc.twice {
			mustApply(t, ctx, r, registry.Unregister(e))
		}
		m := lastMsg(t, ctx, js, cfg.Name, subj.For(e.Key()))
		if m == nil || m.Header.Get(sbjs.OpHeader) != sbjs.OpUnregister {
			t.Errorf("%s: the subject holds %+v, want a removal", tc.name, m)
			continue
		}
		if got, ok := m.Header[jetstream.MsgTTLHeader]; tc.want == "" && ok || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Errorf("%s: removal Nats-TTL = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("List after the removals = %v, want none", got)
	}
}

// TestReadsEndWhenTheirLastMessagesExpire: a List, or a watch's first snapshot, whose
// last messages expire between the consumer's creation and their delivery ends anyway
// instead of waiting for a message that says nothing is pending, which never comes.
// Entries with a one-second TTL are replaced by delete markers when they expire, and
// those markers (one-second marker TTL) vanish a second later with nothing in their
// place: everything is read over and over across that moment.
func TestReadsEndWhenTheirLastMessagesExpire(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	const n = 500
	ops := make([]registry.Op, n)
	for i := range ops {
		e := ep("prod", serviceName(i%10), "http", ipv4(i), 80)
		e.TTL = endpoint.TTL(time.Second)
		ops[i] = registry.Register(e)
	}
	rounds := getenvInt("EXPIRY_ROUNDS", 3)
	var reads int
	for round := range rounds {
		mustApply(t, ctx, r, ops...)
		written := time.Now()
		time.Sleep(1700 * time.Millisecond)
		// Read back to back across the moment the markers expire.
		for time.Since(written) < 2600*time.Millisecond {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := r.List(lctx, endpoint.Filter{})
			cancel()
			if err != nil {
				t.Fatalf("round %d, read %d, %s after the write: List: %v", round, reads, time.Since(written).Round(time.Millisecond), err)
			}
			reads++
			if reads%4 == 0 { // and a watch's first snapshot
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ch, err := r.Watch(wctx, endpoint.Filter{})
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				synced := false
				for ev := range ch {
					if ev.Type == registry.Synced {
						synced = true
						break
					}
				}
				cancel()
				for range ch {
				}
				if !synced {
					t.Fatalf("round %d, %s after the write: watch never synced", round, time.Since(written).Round(time.Millisecond))
				}
			}
		}
	}
	t.Logf("%d reads across %d expiries", reads, rounds)
}

// TestMultiLastPages: a multi_last answer the server cuts short (max bytes) is
// continued where it stopped, and the lookup returns what the consumer does.
func TestMultiLastPages(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	var ops []registry.Op
	for i := range 60 {
		ops = append(ops, registry.Register(ep("prod", serviceName(i%3), "http", ipv4(i), 8080)))
	}
	mustApply(t, ctx, r, ops...)
	mustApply(t, ctx, r, registry.Unregister(ops[3].Endpoint), registry.Unregister(ops[6].Endpoint))
	consumer := openReader(t, nc, sbjs.Options{Stream: cfg}, readCase{"consumer", sbjs.LookupConsumer, "consumer"})
	want := mustList(t, ctx, consumer, endpoint.Filter{Service: serviceName(0)})
	if len(want) != 18 {
		t.Fatalf("consumer List = %d entries, want 18", len(want))
	}
	for _, rc := range readCases[1:3] { // multi_last, checked and not
		rl := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		sbjs.SetMultiLastMaxBytes(rl, 600) // a few entries a page
		got := mustList(t, ctx, rl, endpoint.Filter{Service: serviceName(0)})
		if !slices.EqualFunc(got, want, endpoint.Equal) {
			t.Errorf("%s paged List = %v, want %v", rc.name, got, want)
		}
		if n := sbjs.Fallbacks(rl); n != 0 {
			t.Errorf("%s: %d lookups fell back", rc.name, n)
		}
	}
}

// TestMultiLastFullPage: a filtered lookup matching as many subjects as one multi_last
// answer may carry (1,024) reads them all in one answer, without falling back: the
// answer fits the channel the reader receives it on however slowly the reader runs,
// and so does a direct get by sequence's page of 8,192 (a full lookup of 8,200).
func TestMultiLastFullPage(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	var ops []registry.Op
	for i := range 1024 {
		ops = append(ops, registry.Register(ep("prod", "web", "http", ipv4(i), 8080)))
	}
	for i := range 8200 - 1024 {
		ops = append(ops, registry.Register(ep("prod", "api", "http", ipv4(i), 8080)))
	}
	mustApply(t, ctx, r, ops...)
	for _, rc := range readCases[1:] {
		rl := openReader(t, nc, sbjs.Options{Stream: cfg}, rc)
		if got := mustList(t, ctx, rl, endpoint.Filter{Service: "web"}); len(got) != 1024 {
			t.Errorf("%s: List of a service with 1,024 entries = %d entries", rc.name, len(got))
		}
		if n := sbjs.Fallbacks(rl); n != 0 {
			t.Errorf("%s: the lookup of 1,024 entries fell back", rc.name)
		}
		// All of them: past multi_last's limit, so that path falls back.
		if got := mustList(t, ctx, rl, endpoint.Filter{}); len(got) != 8200 {
			t.Errorf("%s: List of 8,200 entries = %d entries", rc.name, len(got))
		}
	}
}

// TestMultiLastBehindOwnWrites: on an R1 stream, a multi_last answer that does not
// cover the writes this registry had acknowledged (a mirror answering in place of the
// stream's server) is not used: the lookup reads through the consumer instead.
func TestMultiLastBehindOwnWrites(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, ctx, r, registry.Register(a), registry.Register(ep("prod", "api", "http", "10.0.0.2", 80)))
	if got := mustList(t, ctx, r, endpoint.Filter{Service: "web"}); len(got) != 1 || sbjs.Fallbacks(r) != 0 {
		t.Fatalf("List = %v with %d fallbacks, want %s read by multi_last", got, sbjs.Fallbacks(r), a.Key())
	}
	sbjs.PretendWritten(r, 1000)
	if got := mustList(t, ctx, r, endpoint.Filter{Service: "web"}); len(got) != 1 || got[0].Key() != a.Key() {
		t.Fatalf("List behind own writes = %v, want %s", got, a.Key())
	}
	if n := sbjs.Fallbacks(r); n != 1 {
		t.Errorf("%d lookups fell back, want 1", n)
	}
}

// A registry remembers decoded payloads from its second List on: a one-shot reader
// (the CLI's lookup) does not pay for filling a cache it will never read, and a
// registry that reads again (the registrar's polls) decodes each payload once more.
func TestFirstListDoesNotFillTheCache(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	r := openRegistry(t, nc, sbjs.Options{})
	mustApply(t, ctx, r, registry.Register(ep("prod", "web", "http", "10.0.0.1", 80)), registry.Register(ep("prod", "api", "http", "10.0.0.2", 80)))
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("first List = %v, want both entries", got)
	}
	if n := sbjs.CachedPayloads(r); n != 0 {
		t.Fatalf("the first List cached %d payloads, want none", n)
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("second List = %v, want both entries", got)
	}
	if n := sbjs.CachedPayloads(r); n != 2 {
		t.Fatalf("the second List cached %d payloads, want 2", n)
	}
}
