package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// An entry registered again after its TTL ran out is, for a watcher, a removal and
// a new entry, even when the watch never read the server's expiry marker: the new
// message's rollup purges the marker, and a watch that lagged finds only the new
// message on the subject. The message timestamps say the old entry had expired.
func TestWatchSeesExpiryWithoutItsMarker(t *testing.T) {
	const subject = "reg.prod.web.http.10_0_0_1.abc"
	old := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80,
		TTL: endpoint.TTL(time.Second)}
	again := old
	again.TTL = endpoint.Never
	t0 := time.Unix(1_700_000_000, 0).UnixNano()
	for _, c := range []struct {
		name  string
		after time.Duration // the second message's time after the first's
		want  []registry.EventType
	}{
		{"after the TTL", 2 * time.Second, []registry.EventType{registry.Added, registry.Removed, registry.Added}},
		{"at the TTL", time.Second, []registry.EventType{registry.Added, registry.Removed, registry.Added}},
		{"within the TTL", 500 * time.Millisecond, []registry.EventType{registry.Added, registry.Updated}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &watch{out: make(chan registry.Event, 10), known: map[string]watchEntry{}, byKey: map[endpoint.Key][]string{}}
			ctx := context.Background()
			if err := w.handle(ctx, decoded{kind: msgLive, subject: subject, seq: 1, ep: old}, t0, nil); err != nil {
				t.Fatal(err)
			}
			if err := w.handle(ctx, decoded{kind: msgLive, subject: subject, seq: 3, ep: again}, t0+int64(c.after), nil); err != nil {
				t.Fatal(err)
			}
			close(w.out)
			var got []registry.EventType
			for ev := range w.out {
				got = append(got, ev.Type)
			}
			if len(got) != len(c.want) {
				t.Fatalf("events %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("events %v, want %v", got, c.want)
				}
			}
		})
	}
}
