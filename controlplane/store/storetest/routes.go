package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

var errorsIs = errors.Is

var (
	nameA = store.NewName("org", "ns", "svc")
	nameB = store.NewName("org", "ns", "svc").WithID(7)
	// nameMax has the largest id that is not the null sentinel, so the SQLite store's
	// signed column must round-trip every bit.
	nameMax = store.NewName("org", "ns", "svc").WithID(store.NullComponent - 1)
)

func expansion(src, link, dest string, n store.Name) store.Route {
	return store.Route{SourceNodeID: src, LinkID: link, DestNodeID: dest, Name: n, Status: store.RoutePending}
}

func template(dest string, n store.Name) store.Route {
	return store.Route{SourceNodeID: store.AllNodes, DestNodeID: dest, Name: n, Status: store.RouteApplied}
}

func testRoutes(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	tpl, err := s.CreateRoute(ctx, template("a/1", nameA))
	must(t, err)
	r1, err := s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	must(t, err)
	r2, err := s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameMax))
	must(t, err)
	if !(tpl.ID > 0 && r1.ID > tpl.ID && r2.ID > r1.ID) {
		t.Fatalf("ids not increasing: %d %d %d", tpl.ID, r1.ID, r2.ID)
	}
	got, err := s.GetRoute(ctx, r2.ID)
	must(t, err)
	equal(t, "GetRoute", untimedRoutes([]store.Route{got})[0], untimedRoutes([]store.Route{r2})[0])

	// One subscription per node, link and name, whoever it leads to.
	_, err = s.CreateRoute(ctx, expansion("b/1", "l1", "c/1", nameA))
	wantErr(t, err, store.ErrExists)
	_, err = s.CreateRoute(ctx, template("a/1", nameA))
	wantErr(t, err, store.ErrExists)
	// ... and the key holds while the old route waits for its hard delete.
	_, err = store.MarkRouteDeleted(ctx, s, r1.ID)
	must(t, err)
	_, err = s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	wantErr(t, err, store.ErrExists)

	applied := expansion("b/1", "l2", "a/1", nameA)
	applied.Status = store.RouteApplied
	_, err = s.CreateRoute(ctx, applied)
	wantErr(t, err, store.ErrInvalidTransition)
	deleted := expansion("b/1", "l2", "a/1", nameA)
	deleted.Deleted = true
	_, err = s.CreateRoute(ctx, deleted)
	wantErr(t, err, store.ErrInvalidTransition)

	must(t, s.DeleteRoute(ctx, r1.ID))
	wantErr(t, s.DeleteRoute(ctx, r1.ID), store.ErrNotFound)
	_, err = s.GetRoute(ctx, r1.ID)
	wantErr(t, err, store.ErrNotFound)
	r3, err := s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	must(t, err)
	if r3.ID <= r2.ID {
		t.Fatalf("id %d reused after a hard delete (last %d)", r3.ID, r2.ID)
	}
	_, err = s.UpdateRoute(ctx, r1.ID, store.RouteUpdate{Status: store.Ptr(store.RouteApplied)})
	wantErr(t, err, store.ErrNotFound)
}

func testRouteFilters(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var rs []store.Route
	for _, r := range []store.Route{
		template("a/1", nameA),
		template("c/1", nameA),
		expansion("b/1", "l1", "a/1", nameA),
		expansion("b/1", "l1", "a/1", nameB),
		expansion("a/1", "l1", "c/1", nameA),
		expansion("d/1", "l4", "a/1", nameA),
	} {
		got, err := s.CreateRoute(ctx, r)
		must(t, err)
		rs = append(rs, got)
	}
	del, err := store.MarkRouteDeleted(ctx, s, rs[5].ID)
	must(t, err)
	rs[5] = del
	pick := func(idx ...int) []store.Route {
		out := []store.Route{}
		for _, i := range idx {
			out = append(out, rs[i])
		}
		return untimedRoutes(out)
	}
	for _, c := range []struct {
		name string
		f    store.RouteFilter
		want []store.Route
	}{
		{"all live", store.RouteFilter{}, pick(0, 1, 2, 3, 4)},
		{"include deleted", store.RouteFilter{Deleted: store.IncludeDeleted}, pick(0, 1, 2, 3, 4, 5)},
		{"only deleted", store.RouteFilter{Deleted: store.OnlyDeleted}, pick(5)},
		{"templates", store.RouteFilter{SourceNodeID: store.AllNodes}, pick(0, 1)},
		{"source", store.RouteFilter{SourceNodeID: "b/1"}, pick(2, 3)},
		{"dest", store.RouteFilter{DestNodeID: "a/1", Deleted: store.IncludeDeleted}, pick(0, 2, 3, 5)},
		{"link", store.RouteFilter{LinkID: "l1"}, pick(2, 3, 4)},
		{"name without id", store.RouteFilter{Name: &nameA}, pick(0, 1, 2, 4)},
		{"name with id", store.RouteFilter{Name: &nameB}, pick(3)},
		{"source and name", store.RouteFilter{SourceNodeID: "b/1", Name: &nameB}, pick(3)},
		{"expansions", store.RouteFilter{ExpansionsOnly: true, Deleted: store.IncludeDeleted}, pick(2, 3, 4, 5)},
		{"expansions of a name", store.RouteFilter{ExpansionsOnly: true, Name: &nameA}, pick(2, 4)},
		{"no match", store.RouteFilter{SourceNodeID: "zzz"}, pick()},
	} {
		got, err := s.ListRoutes(ctx, c.f)
		must(t, err)
		equal(t, c.name, untimedRoutes(got), c.want)
	}
}

// testRouteRekey moves a route to another node, as gateway failover does.
func testRouteRekey(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r, err := s.CreateRoute(ctx, expansion("a/1", "l1", "b/1", nameA))
	must(t, err)
	_, err = store.MarkRouteApplied(ctx, s, r.ID)
	must(t, err)
	moved, err := s.UpdateRoute(ctx, r.ID, store.RouteUpdate{
		SourceNodeID: store.Ptr("a/2"), Status: store.Ptr(store.RoutePending),
	})
	must(t, err)
	if moved.ID != r.ID || moved.SourceNodeID != "a/2" || moved.Status != store.RoutePending {
		t.Fatalf("moved route = %+v", moved)
	}
	// The old key is free again, the new one is taken.
	_, err = s.CreateRoute(ctx, expansion("a/1", "l1", "b/1", nameA))
	must(t, err)
	other, err := s.CreateRoute(ctx, expansion("a/3", "l1", "b/1", nameA))
	must(t, err)
	_, err = s.UpdateRoute(ctx, other.ID, store.RouteUpdate{SourceNodeID: store.Ptr("a/2")})
	wantErr(t, err, store.ErrExists)
	got, err := s.GetRoute(ctx, other.ID)
	must(t, err)
	if got.SourceNodeID != "a/3" {
		t.Fatalf("failed re-key changed the route: %+v", got)
	}
	dest, err := s.UpdateRoute(ctx, other.ID, store.RouteUpdate{DestNodeID: store.Ptr("b/2")})
	must(t, err)
	if dest.DestNodeID != "b/2" || dest.Status != store.RoutePending {
		t.Fatalf("dest update = %+v", dest)
	}
}

var routeStatuses = []store.RouteStatus{store.RoutePending, store.RouteApplied, store.RouteFailed, store.RouteDeleted}

var routePathTo = map[store.RouteStatus][]store.RouteStatus{
	store.RoutePending: nil,
	store.RouteApplied: {store.RouteApplied},
	store.RouteFailed:  {store.RouteFailed},
	store.RouteDeleted: {store.RouteDeleted},
}

func testRouteTransitions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	n := 0
	for _, from := range routeStatuses {
		for _, to := range routeStatuses {
			n++
			r, err := s.CreateRoute(ctx, expansion("a/1", fmt.Sprintf("l%d", n), "b/1", nameA))
			must(t, err)
			for _, step := range routePathTo[from] {
				_, err := store.SetRouteStatus(ctx, s, r.ID, step, "")
				must(t, err)
			}
			_, err = store.SetRouteStatus(ctx, s, r.ID, to, "msg")
			got, gerr := s.GetRoute(ctx, r.ID)
			must(t, gerr)
			if store.RouteTransitionAllowed(from, to) {
				if err != nil || got.Status != to || got.Deleted != (to == store.RouteDeleted) {
					t.Errorf("%s -> %s: err %v, status %s deleted %v", from, to, err, got.Status, got.Deleted)
				}
				continue
			}
			if !errorsIs(err, store.ErrInvalidTransition) || got.Status != from {
				t.Errorf("%s -> %s: err %v, status %s; want ErrInvalidTransition and %s", from, to, err, got.Status, from)
			}
		}
	}
	for _, e := range [][2]store.RouteStatus{
		{store.RoutePending, store.RouteApplied}, {store.RoutePending, store.RouteFailed},
		{store.RoutePending, store.RoutePending}, {store.RouteFailed, store.RoutePending},
		{store.RoutePending, store.RouteDeleted},
	} {
		if !store.RouteTransitionAllowed(e[0], e[1]) {
			t.Errorf("spec transition %s -> %s not allowed", e[0], e[1])
		}
	}
	if store.RouteTransitionAllowed(store.RouteFailed, store.RouteApplied) {
		t.Error("Failed -> Applied must go through Pending")
	}
}

func testRouteDeletedIsFinal(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r, err := s.CreateRoute(ctx, expansion("a/1", "l1", "b/1", nameA))
	must(t, err)
	_, err = store.MarkRouteDeleted(ctx, s, r.ID)
	must(t, err)
	_, err = store.MarkRouteApplied(ctx, s, r.ID)
	wantErr(t, err, store.ErrInvalidTransition)
	_, err = s.UpdateRoute(ctx, r.ID, store.RouteUpdate{SourceNodeID: store.Ptr("a/2")})
	wantErr(t, err, store.ErrInvalidTransition)
	must(t, s.DeleteRoute(ctx, r.ID))
	_, err = s.CreateRoute(ctx, expansion("a/1", "l1", "b/1", nameA))
	must(t, err)
}
