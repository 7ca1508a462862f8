package jetstream

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// An entry registered again after it expired is, for a watcher, a removal and a
// new entry, even when the watch never read the server's expiry marker: the new
// message's rollup purges the marker, and a watch that lagged finds only the new
// message on the subject. The messages' timestamps, the old one's Nats-TTL and the
// stream's MaxAge say the old entry had expired.
func TestWatchSeesExpiryWithoutItsMarker(t *testing.T) {
	const subject = "reg.prod.web.http.10_0_0_1.abc"
	old := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}
	again := old
	again.TTL = endpoint.Never
	ttl := func(v string) nats.Header {
		if v == "" {
			return nil
		}
		return nats.Header{jetstream.MsgTTLHeader: {v}}
	}
	t0 := time.Unix(1_700_000_000, 0).UnixNano()
	removedAndAdded := []registry.EventType{registry.Added, registry.Removed, registry.Added}
	updated := []registry.EventType{registry.Added, registry.Updated}
	for _, c := range []struct {
		name   string
		ttl    string        // the old message's Nats-TTL
		maxAge time.Duration // the stream's
		after  time.Duration // the new message's time after the old one's
		want   []registry.EventType
	}{
		{"after its TTL", "1s", 0, 2 * time.Second, removedAndAdded},
		{"at its TTL", "1s", 0, time.Second, removedAndAdded},
		{"within its TTL", "1s", 0, 500 * time.Millisecond, updated},
		{"a TTL in seconds", "1", 0, 2 * time.Second, removedAndAdded},
		{"after MaxAge, no TTL", "", time.Second, 2 * time.Second, removedAndAdded},
		{"no TTL, no MaxAge", "", 0, time.Hour, updated},
		{"a TTL capped by MaxAge", "48h", time.Second, 2 * time.Second, removedAndAdded},
		{"never outlives MaxAge", "never", time.Second, time.Hour, updated},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &watch{out: make(chan registry.Event, 10), known: map[string]watchEntry{}, byKey: map[endpoint.Key][]string{},
				maxAge: c.maxAge}
			ctx := context.Background()
			if err := w.handle(ctx, decoded{kind: msgLive, subject: subject, seq: 1, ep: old}, t0, ttl(c.ttl)); err != nil {
				t.Fatal(err)
			}
			tm := t0 + int64(c.after)
			if err := w.handle(ctx, decoded{kind: msgLive, subject: subject, seq: 3, ep: again}, tm, ttl("never")); err != nil {
				t.Fatal(err)
			}
			close(w.out)
			var got []registry.EventType
			for ev := range w.out {
				got = append(got, ev.Type)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("events %v, want %v", got, c.want)
			}
		})
	}
}
