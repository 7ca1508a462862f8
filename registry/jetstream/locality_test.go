package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/ccmref"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestLocalityThroughTheStream: an entry with region, zone, Draining and as many
// annotations as a write allows (so 67 on the wire) is read back whole by every read
// path and by a watch, a change of health alone is Updated, and CCM's own reader
// (internal/ccmref) reads the same entries, the reserved keys as plain annotations.
func TestLocalityThroughTheStream(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, startServer(t).ClientURL())
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})

	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.Region, e.Zone, e.Health = "eu-west", "eu-west-1a", endpoint.Draining
	e.Annotations = map[string]string{}
	for i := range 64 {
		e.Annotations[fmt.Sprintf("k%02d", i)] = "v"
	}
	for _, h := range []endpoint.Health{endpoint.Draining, endpoint.Healthy, endpoint.Unhealthy} {
		e.Health = h
		mustApply(t, ctx, r, registry.Register(e))
		want := registry.Updated
		if h == endpoint.Draining {
			want = registry.Added
		}
		if ev := expectEvent(t, ch, 5*time.Second, want, e.Key()); !endpoint.Equal(ev.Endpoint, e) {
			t.Fatalf("health %s: watch sent %+v, want %+v", h, ev.Endpoint, e)
		}
		for _, rc := range readCases {
			got := mustList(t, ctx, openReader(t, nc, sbjs.Options{Stream: cfg}, rc), endpoint.Filter{Service: "web"})
			if len(got) != 1 || !endpoint.Equal(got[0], e) {
				t.Fatalf("health %s, %s: List = %+v, want %+v", h, rc.name, got, e)
			}
		}
		expectCCMReads(t, nc, cfg, e)
	}
}

// expectCCMReads checks that CCM's reader reads e's entry, with e's annotations and
// the reserved ones among them.
func expectCCMReads(t *testing.T, nc *nats.Conn, cfg sbjs.StreamConfig, e endpoint.Endpoint) {
	t.Helper()
	got, err := ccmref.Lookup(testCtx(t, 10*time.Second), nc, cfg.Name, cfg.Prefix+".>", 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("CCM's lookup = %v, %v; want one entry", got, err)
	}
	c := got[0]
	want := map[string]string{"endpoint.switchboard.dev/region": e.Region, "endpoint.switchboard.dev/zone": e.Zone}
	if e.Health != endpoint.Healthy {
		want["endpoint.switchboard.dev/health"] = e.Health.String()
	}
	if c.Address != e.Address || c.Port != float64(e.Port) || c.Priority != int64(e.Priority) ||
		len(c.Annotations) != len(e.Annotations)+len(want) {
		t.Fatalf("CCM read %+v (%d annotations), want %s with %d", c, len(c.Annotations), e.Key(), len(e.Annotations)+len(want))
	}
	for k, v := range want {
		if c.Annotations[k] != v {
			t.Errorf("CCM read annotation %s = %q, want %q", k, c.Annotations[k], v)
		}
	}
}

// TestReservedAnnotationRefused: a user annotation under the reserved prefix would be
// read back as locality, so a write refuses it, naming the annotation.
func TestReservedAnnotationRefused(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	r := openRegistry(t, connect(t, startServer(t).ClientURL()), sbjs.Options{})
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.Annotations = map[string]string{"endpoint.switchboard.dev/zone": "a"}
	err := r.Apply(ctx, []registry.Op{registry.Register(e)})
	if !errors.Is(err, endpoint.ErrInvalid) || !strings.Contains(err.Error(), "annotations[endpoint.switchboard.dev/zone]") {
		t.Fatalf("Apply = %v, want an invalid-endpoint error naming the annotation", err)
	}
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("List after a refused write = %v", got)
	}
}
