package memory

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// TestRoutePoolsDropUnusedValues: the route table keeps a string or a name only while
// a route holds it — after the routes are deleted, re-keyed or rolled back, nothing
// of them is left — and a route reads back with the values and time it was written
// with.
func TestRoutePoolsDropUnusedValues(t *testing.T) {
	ctx := context.Background()
	s := New()
	name := store.NewName("o", "n", "s")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := s.CreateRoute(ctx, store.Route{SourceNodeID: store.AllNodes, DestNodeID: "a/1", Name: name, Status: store.RouteApplied})
	must(err)
	r, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "b/1", DestNodeID: "a/1", LinkID: "l1", Name: name, Status: store.RoutePending})
	must(err)
	got, err := s.GetRoute(ctx, r.ID)
	must(err)
	if got != r {
		t.Fatalf("read back %+v, want %+v", got, r)
	}
	r, err = store.MarkRouteFailed(ctx, s, r.ID, "boom")
	must(err)
	r, err = s.UpdateRoute(ctx, r.ID, store.RouteUpdate{SourceNodeID: store.Ptr("c/1")})
	must(err)
	if got, _ := s.GetRoute(ctx, r.ID); got != r || got.StatusMessage != "boom" || got.SourceNodeID != "c/1" {
		t.Fatalf("read back %+v, want %+v", got, r)
	}
	if _, ok := s.routes.strs.lookup("b/1"); ok {
		t.Error("the old source is still pooled")
	}
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if _, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "d/1", LinkID: "l2", Name: store.NewName("o", "n", "t"), Status: store.RoutePending}); err != nil {
			return err
		}
		return errors.New("undo")
	})
	if err == nil {
		t.Fatal("transaction did not fail")
	}
	for _, v := range []string{"d/1", "l2"} {
		if _, ok := s.routes.strs.lookup(v); ok {
			t.Errorf("%s is pooled after the rollback", v)
		}
	}
	must(s.DeleteRoute(ctx, r.ID))
	must(s.DeleteRoute(ctx, tpl.ID))
	if n := len(s.routes.strs.ids) + len(s.routes.names.ids); n != 0 {
		t.Errorf("%d values pooled with no route", n)
	}
	// Ids are reused: the pools do not grow with churn.
	for i := range 100 {
		r, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "x/" + string(rune('a'+i%26)), LinkID: "l", Name: name, Status: store.RoutePending})
		must(err)
		must(s.DeleteRoute(ctx, r.ID))
	}
	if n := len(s.routes.strs.vals); n > 8 {
		t.Errorf("the string pool grew to %d slots", n)
	}
}

// TestRouteTimeLocation: a route's time reads back in its location, UTC or local.
func TestRouteTimeLocation(t *testing.T) {
	ctx := context.Background()
	for _, loc := range []*time.Location{time.UTC, time.Local, time.FixedZone("x", 3600)} {
		s := New()
		s.now = func() time.Time { return time.Now().In(loc) }
		r, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "b/1", LinkID: "l1", Name: store.NewName("o", "n", "s"), Status: store.RoutePending})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetRoute(ctx, r.ID)
		if got != r || got.LastUpdated.Location() != loc {
			t.Errorf("%s: read back %+v, want %+v", loc, got, r)
		}
	}
}

// TestSlots: ids set in any order are found, listed in order and cleared; the
// directory keeps no page without a route.
func TestSlots(t *testing.T) {
	var x slots
	ids := []int64{5000, 1, 513, 512, 100000, 3}
	for i, id := range ids {
		x.set(id, int32(i))
	}
	for i, id := range ids {
		if s, ok := x.get(id); !ok || s != int32(i) {
			t.Fatalf("get(%d) = %d %v, want %d", id, s, ok, i)
		}
	}
	for _, id := range []int64{0, 2, 511, 514, 99999, 1 << 40} {
		if _, ok := x.get(id); ok {
			t.Errorf("get(%d) found a slot", id)
		}
	}
	if got, want := x.ids(), []int64{1, 3, 512, 513, 5000, 100000}; !slices.Equal(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
	for _, id := range []int64{1, 3, 512, 513} {
		x.clear(id)
	}
	if x.first != 5000>>idPageBits || x.pages[0] == nil {
		t.Errorf("directory starts at page %d (%v), want the page of 5000", x.first, x.pages[0] != nil)
	}
	x.clear(5000)
	x.clear(100000)
	if len(x.pages) != 0 || x.n != 0 {
		t.Errorf("%d pages, %d ids left", len(x.pages), x.n)
	}
}
