package storetest

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// wantVersion checks the version a write returned and the one Get and List return.
func wantVersion[T any](t *testing.T, what string, got int64, get func() (T, error), version func(T) int64, want int64) {
	t.Helper()
	if got != want {
		t.Fatalf("%s returned version %d, want %d", what, got, want)
	}
	rec, err := get()
	must(t, err)
	if v := version(rec); v != want {
		t.Fatalf("after %s the stored version is %d, want %d", what, v, want)
	}
}

// testLinkVersions: a new link is at version 1 and every update, whatever it changes,
// adds one; Get and List report the stored version.
func testLinkVersions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	l := link("v", "a/1", "b", "b/1")
	l.Version = 42 // the store owns versions
	must(t, s.CreateLink(ctx, l))
	get := func() (store.Link, error) { return s.GetLink(ctx, "v") }
	ver := func(l store.Link) int64 { return l.Version }
	wantVersion(t, "CreateLink", 1, get, ver, 1)
	for i, u := range []store.LinkUpdate{
		{Status: store.Ptr(store.LinkConnecting)},
		{DestNodeID: store.Ptr("b/2")},
		{StatusMessage: store.Ptr("")}, // no actual change still counts
		{SourceNodeID: store.Ptr("a/2"), Status: store.Ptr(store.LinkPending)},
		{IfVersion: store.Ptr(int64(5)), Status: store.Ptr(store.LinkDeleted)},
	} {
		got, err := s.UpdateLink(ctx, "v", u)
		must(t, err)
		wantVersion(t, "UpdateLink", got.Version, get, ver, int64(i+2))
	}
	ls, err := s.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	if len(ls) != 1 || ls[0].Version != 6 {
		t.Fatalf("ListLinks = %+v, want the link at version 6", ls)
	}
}

// testLinkPrecondition: a stale IfVersion fails with ErrConflict and changes nothing,
// also where the update would otherwise be refused or the link is deleted; a current
// one succeeds. DeleteLinkIf likewise.
func testLinkPrecondition(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.CreateLink(ctx, link("c", "a/1", "b", "b/1")))
	// The core moves the link while a reconciler holds version 1.
	moved, err := s.UpdateLink(ctx, "c", store.LinkUpdate{SourceNodeID: store.Ptr("a/2")})
	must(t, err)
	_, err = store.SetLinkStatusIf(ctx, s, "c", 1, store.LinkConnecting, "")
	wantErr(t, err, store.ErrConflict)
	_, err = s.UpdateLink(ctx, "c", store.LinkUpdate{IfVersion: store.Ptr(int64(3)), DestNodeID: store.Ptr("x")})
	wantErr(t, err, store.ErrConflict) // a version from the future is as wrong
	got, err := s.GetLink(ctx, "c")
	must(t, err)
	equal(t, "link after refused updates", got, moved)

	got, err = store.SetLinkStatusIf(ctx, s, "c", moved.Version, store.LinkConnecting, "dialling")
	must(t, err)
	if got.Status != store.LinkConnecting || got.StatusMessage != "dialling" || got.Version != 3 {
		t.Fatalf("current precondition: %+v", got)
	}

	wantErr(t, s.DeleteLinkIf(ctx, "c", 2), store.ErrConflict)
	_, err = s.GetLink(ctx, "c")
	must(t, err)
	marked, err := store.MarkLinkDeleted(ctx, s, "c")
	must(t, err)
	_, err = store.SetLinkStatusIf(ctx, s, "c", 3, store.LinkApplied, "")
	wantErr(t, err, store.ErrConflict)
	wantErr(t, s.DeleteLinkIf(ctx, "c", 3), store.ErrConflict)
	got, err = s.GetLink(ctx, "c")
	must(t, err)
	equal(t, "deleted link after refused writes", got, marked)
	must(t, s.DeleteLinkIf(ctx, "c", marked.Version))
	wantErr(t, s.DeleteLinkIf(ctx, "c", marked.Version), store.ErrNotFound)
	_, err = store.SetLinkStatusIf(ctx, s, "c", marked.Version, store.LinkApplied, "")
	wantErr(t, err, store.ErrNotFound)
}

// testRouteVersions: route versions start at 1 and count every update, re-keys too.
func testRouteVersions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r, err := s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	must(t, err)
	get := func() (store.Route, error) { return s.GetRoute(ctx, r.ID) }
	ver := func(r store.Route) int64 { return r.Version }
	wantVersion(t, "CreateRoute", r.Version, get, ver, 1)
	tpl, err := s.CreateRoute(ctx, template("a/1", nameB))
	must(t, err)
	if tpl.Version != 1 {
		t.Fatalf("new template at version %d", tpl.Version)
	}
	for i, u := range []store.RouteUpdate{
		{Status: store.Ptr(store.RouteApplied)},
		{SourceNodeID: store.Ptr("b/2"), Status: store.Ptr(store.RoutePending)}, // re-key
		{DestNodeID: store.Ptr("a/2")},
		{IfVersion: store.Ptr(int64(4)), Status: store.Ptr(store.RouteDeleted)},
	} {
		got, err := s.UpdateRoute(ctx, r.ID, u)
		must(t, err)
		wantVersion(t, "UpdateRoute", got.Version, get, ver, int64(i+2))
	}
	rs, err := s.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	if len(rs) != 2 || rs[0].Version != 5 || rs[1].Version != 1 {
		t.Fatalf("ListRoutes = %+v, want versions 5 and 1", rs)
	}
}

// testRoutePrecondition: a stale IfVersion fails with ErrConflict before anything
// else is checked — a re-key to a taken key too — and changes nothing.
func testRoutePrecondition(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r, err := s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	must(t, err)
	_, err = s.CreateRoute(ctx, expansion("b/2", "l1", "a/1", nameA))
	must(t, err)
	// The core re-keys the route (gateway failover) while a reconciler holds version 1.
	rekeyed, err := s.UpdateRoute(ctx, r.ID, store.RouteUpdate{SourceNodeID: store.Ptr("b/3")})
	must(t, err)
	_, err = store.SetRouteStatusIf(ctx, s, r.ID, 1, store.RouteApplied, "")
	wantErr(t, err, store.ErrConflict)
	_, err = s.UpdateRoute(ctx, r.ID, store.RouteUpdate{IfVersion: store.Ptr(int64(1)), SourceNodeID: store.Ptr("b/2")})
	wantErr(t, err, store.ErrConflict)
	wantErr(t, s.DeleteRouteIf(ctx, r.ID, 1), store.ErrConflict)
	got, err := s.GetRoute(ctx, r.ID)
	must(t, err)
	equal(t, "route after refused writes", got, rekeyed)
	// The re-key released the old key.
	_, err = s.CreateRoute(ctx, expansion("b/1", "l1", "a/1", nameA))
	must(t, err)

	got, err = store.SetRouteStatusIf(ctx, s, r.ID, rekeyed.Version, store.RouteApplied, "")
	must(t, err)
	if got.Status != store.RouteApplied || got.Version != rekeyed.Version+1 {
		t.Fatalf("current precondition: %+v", got)
	}
	_, err = store.SetRouteStatusIf(ctx, s, r.ID, rekeyed.Version, store.RoutePending, "")
	wantErr(t, err, store.ErrConflict)
	marked, err := store.MarkRouteDeleted(ctx, s, r.ID)
	must(t, err)
	wantErr(t, s.DeleteRouteIf(ctx, r.ID, got.Version), store.ErrConflict)
	must(t, s.DeleteRouteIf(ctx, r.ID, marked.Version))
	wantErr(t, s.DeleteRouteIf(ctx, r.ID, marked.Version), store.ErrNotFound)
	_, err = s.GetRoute(ctx, r.ID)
	wantErr(t, err, store.ErrNotFound)
}
