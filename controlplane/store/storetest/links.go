package storetest

import (
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

func link(id, src, dstGroup, target string) store.Link {
	return store.Link{
		ID: id, SourceNodeID: src, SourceGroup: groupOf(src), DestGroup: dstGroup, TargetNodeID: target,
		DestEndpoint: dstGroup + ".example:443", ConnConfig: `{"endpoint":"` + dstGroup + `.example:443"}`,
		Status: store.LinkPending,
	}
}

func groupOf(id string) string {
	for i := range id {
		if id[i] == '/' {
			return id[:i]
		}
	}
	return ""
}

func testLinks(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	l := link("l-2", "a/1", "b", "b/1")
	must(t, s.CreateLink(ctx, l))
	wantErr(t, s.CreateLink(ctx, l), store.ErrExists)
	bad := link("l-3", "a/1", "c", "c/1")
	bad.Status = store.LinkApplied
	wantErr(t, s.CreateLink(ctx, bad), store.ErrInvalidTransition)
	bad = link("l-3", "a/1", "c", "c/1")
	bad.Deleted = true
	wantErr(t, s.CreateLink(ctx, bad), store.ErrInvalidTransition)
	if err := s.CreateLink(ctx, link("", "a/1", "c", "c/1")); err == nil {
		t.Fatal("link without id accepted")
	}

	got, err := s.GetLink(ctx, "l-2")
	must(t, err)
	if got.LastUpdated.IsZero() {
		t.Fatal("LastUpdated not set")
	}
	equal(t, "GetLink", untimedLinks([]store.Link{got})[0], l)
	_, err = s.GetLink(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)

	must(t, s.DeleteLink(ctx, "l-2"))
	wantErr(t, s.DeleteLink(ctx, "l-2"), store.ErrNotFound)
	_, err = s.UpdateLink(ctx, "l-2", store.LinkUpdate{Status: store.Ptr(store.LinkConnecting)})
	wantErr(t, err, store.ErrNotFound)
}

func testLinkFilters(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	ab := link("1", "a/1", "b", "b/1")
	ac := link("2", "a/1", "c", "c/1")
	cb := link("3", "c/1", "b", "b/2")
	gone := link("4", "a/2", "d", "d/1")
	for _, l := range []store.Link{cb, ab, gone, ac} {
		must(t, s.CreateLink(ctx, l))
	}
	claimed, err := s.UpdateLink(ctx, "1", store.LinkUpdate{DestNodeID: store.Ptr("b/9")})
	must(t, err)
	ab.DestNodeID = "b/9"
	equal(t, "claimed link", untimedLinks([]store.Link{claimed})[0], ab)
	_, err = store.MarkLinkDeleted(ctx, s, "4")
	must(t, err)
	gone.Status, gone.Deleted = store.LinkDeleted, true

	for _, c := range []struct {
		name string
		f    store.LinkFilter
		want []store.Link
	}{
		{"all live", store.LinkFilter{}, []store.Link{ab, ac, cb}},
		{"include deleted", store.LinkFilter{Deleted: store.IncludeDeleted}, []store.Link{ab, ac, cb, gone}},
		{"only deleted", store.LinkFilter{Deleted: store.OnlyDeleted}, []store.Link{gone}},
		{"source", store.LinkFilter{SourceNodeID: "a/1"}, []store.Link{ab, ac}},
		{"deleted outgoing", store.LinkFilter{SourceNodeID: "a/2", Deleted: store.OnlyDeleted}, []store.Link{gone}},
		{"dest", store.LinkFilter{DestNodeID: "b/9"}, []store.Link{ab}},
		{"target", store.LinkFilter{TargetNodeID: "b/2"}, []store.Link{cb}},
		{"group either side", store.LinkFilter{Group: "c"}, []store.Link{ac, cb}},
		{"group and source", store.LinkFilter{Group: "b", SourceNodeID: "c/1"}, []store.Link{cb}},
		{"no match", store.LinkFilter{Group: "zzz"}, []store.Link{}},
	} {
		got, err := s.ListLinks(ctx, c.f)
		must(t, err)
		equal(t, c.name, untimedLinks(got), c.want)
	}
}

func testLinkUpdateFields(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	l := link("1", "a/1", "b", "b/1")
	must(t, s.CreateLink(ctx, l))
	got, err := s.UpdateLink(ctx, "1", store.LinkUpdate{
		SourceNodeID: store.Ptr("a/2"), DestEndpoint: store.Ptr("b2.example:443"),
		ConnConfig: store.Ptr(`{"x":1}`), Status: store.Ptr(store.LinkConnecting),
	})
	must(t, err)
	l.SourceNodeID, l.DestEndpoint, l.ConnConfig, l.Status = "a/2", "b2.example:443", `{"x":1}`, store.LinkConnecting
	equal(t, "updated link", untimedLinks([]store.Link{got})[0], l)
	stored, err := s.GetLink(ctx, "1")
	must(t, err)
	equal(t, "stored link", untimedLinks([]store.Link{stored})[0], l)
	if _, err := store.SetLinkStatus(ctx, s, "1", store.LinkFailed, "dial: refused"); err != nil {
		t.Fatal(err)
	}
	stored, err = s.GetLink(ctx, "1")
	must(t, err)
	if stored.Status != store.LinkFailed || stored.StatusMessage != "dial: refused" {
		t.Fatalf("status = %s %q", stored.Status, stored.StatusMessage)
	}
}

var linkStatuses = []store.LinkStatus{
	store.LinkPending, store.LinkConnecting, store.LinkApplied, store.LinkFailed, store.LinkDeleted,
}

// linkPathTo lists the steps that bring a new (Pending) link to st.
var linkPathTo = map[store.LinkStatus][]store.LinkStatus{
	store.LinkPending:    nil,
	store.LinkConnecting: {store.LinkConnecting},
	store.LinkApplied:    {store.LinkConnecting, store.LinkApplied},
	store.LinkFailed:     {store.LinkConnecting, store.LinkFailed},
	store.LinkDeleted:    {store.LinkDeleted},
}

// testLinkTransitions tries every (from, to) pair: the allowed ones succeed, the rest
// fail with ErrInvalidTransition and leave the link as it was.
func testLinkTransitions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	n := 0
	for _, from := range linkStatuses {
		for _, to := range linkStatuses {
			n++
			id := fmt.Sprintf("link-%d", n)
			must(t, s.CreateLink(ctx, link(id, "a/1", "b", "b/1")))
			for _, step := range linkPathTo[from] {
				_, err := store.SetLinkStatus(ctx, s, id, step, "")
				must(t, err)
			}
			_, err := store.SetLinkStatus(ctx, s, id, to, "msg")
			got, gerr := s.GetLink(ctx, id)
			must(t, gerr)
			if store.LinkTransitionAllowed(from, to) {
				if err != nil || got.Status != to || got.Deleted != (to == store.LinkDeleted) {
					t.Errorf("%s -> %s: err %v, status %s deleted %v", from, to, err, got.Status, got.Deleted)
				}
				continue
			}
			if !errorsIs(err, store.ErrInvalidTransition) || got.Status != from {
				t.Errorf("%s -> %s: err %v, status %s; want ErrInvalidTransition and %s", from, to, err, got.Status, from)
			}
		}
	}
	// The spec's machine, edge by edge, must be among the allowed transitions.
	for _, e := range [][2]store.LinkStatus{
		{store.LinkPending, store.LinkConnecting}, {store.LinkConnecting, store.LinkApplied},
		{store.LinkConnecting, store.LinkFailed}, {store.LinkApplied, store.LinkPending},
		{store.LinkPending, store.LinkDeleted},
	} {
		if !store.LinkTransitionAllowed(e[0], e[1]) {
			t.Errorf("spec transition %s -> %s not allowed", e[0], e[1])
		}
	}
}

// testLinkDeletedIsFinal: once marked deleted, a link only goes away (the hard delete);
// a late ack cannot touch it.
func testLinkDeletedIsFinal(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.CreateLink(ctx, link("1", "a/1", "b", "b/1")))
	_, err := store.MarkLinkDeleted(ctx, s, "1")
	must(t, err)
	_, err = s.UpdateLink(ctx, "1", store.LinkUpdate{DestNodeID: store.Ptr("b/1")})
	wantErr(t, err, store.ErrInvalidTransition)
	_, err = store.SetLinkStatus(ctx, s, "1", store.LinkApplied, "")
	wantErr(t, err, store.ErrInvalidTransition)
	got, err := s.GetLink(ctx, "1")
	must(t, err)
	if !got.Deleted || got.Status != store.LinkDeleted || got.DestNodeID != "" {
		t.Fatalf("deleted link changed: %+v", got)
	}
	must(t, s.DeleteLink(ctx, "1"))
	_, err = s.GetLink(ctx, "1")
	wantErr(t, err, store.ErrNotFound)
}
