package storetest

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

func node(id, group string, connected bool, ext string) store.Node {
	n := store.Node{ID: id, Group: group, Connected: connected, Session: 1}
	n.ConnDetails = []store.ConnectionDetails{{Endpoint: "10.0.0.1:46357", ExternalEndpoint: ext, MTLSRequired: ext != ""}}
	return n
}

func testNodes(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	b2 := node("b/2", "b", false, "")
	a1 := node("a/1", "a", true, "a.example:443")
	b1 := node("b/1", "b", true, "b.example:443")
	bare := store.Node{ID: "solo", Connected: true}
	for _, n := range []store.Node{b2, a1, b1, bare} {
		must(t, s.SaveNode(ctx, n))
	}
	got, err := s.GetNode(ctx, "a/1")
	must(t, err)
	if got.LastUpdated.IsZero() {
		t.Fatal("LastUpdated not set")
	}
	equal(t, "GetNode", untimedNodes([]store.Node{got})[0], a1)
	_, err = s.GetNode(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)

	all, err := s.ListNodes(ctx, store.NodeFilter{})
	must(t, err)
	equal(t, "ListNodes", untimedNodes(all), []store.Node{a1, b1, b2, bare})
	inB, err := s.ListNodes(ctx, store.NodeFilter{Group: "b"})
	must(t, err)
	equal(t, "ListNodes group b", untimedNodes(inB), []store.Node{b1, b2})
	conn, err := s.ListNodes(ctx, store.NodeFilter{Group: "b", ConnectedOnly: true})
	must(t, err)
	equal(t, "ListNodes connected b", untimedNodes(conn), []store.Node{b1})
	groups, err := s.ListGroups(ctx)
	must(t, err)
	equal(t, "ListGroups", groups, []string{"a", "b"})

	must(t, s.SetNodeConnected(ctx, "b/2", true))
	got, err = s.GetNode(ctx, "b/2")
	must(t, err)
	if !got.Connected {
		t.Fatal("SetNodeConnected(true) did not stick")
	}
	wantErr(t, s.SetNodeConnected(ctx, "nope", true), store.ErrNotFound)

	must(t, s.DeleteNode(ctx, "a/1"))
	wantErr(t, s.DeleteNode(ctx, "a/1"), store.ErrNotFound)
	groups, err = s.ListGroups(ctx)
	must(t, err)
	equal(t, "ListGroups after delete", groups, []string{"b"})
	empty, err := s.ListNodes(ctx, store.NodeFilter{Group: "zzz"})
	must(t, err)
	if empty == nil || len(empty) != 0 {
		t.Fatalf("empty list = %#v, want non-nil empty", empty)
	}
}

func testNodeUpsert(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	n := node("a/1", "a", true, "old:443")
	must(t, s.SaveNode(ctx, n))
	n.ConnDetails[0].ExternalEndpoint, n.Session, n.Connected = "new:443", 2, false
	must(t, s.SaveNode(ctx, n))
	got, err := s.GetNode(ctx, "a/1")
	must(t, err)
	equal(t, "replaced node", untimedNodes([]store.Node{got})[0], n)
	if got.ExternalEndpoint() != "new:443" {
		t.Fatalf("ExternalEndpoint = %q", got.ExternalEndpoint())
	}
	// The store must copy: changing the caller's slice does not change the record.
	n.ConnDetails[0].Endpoint = "mutated"
	got, err = s.GetNode(ctx, "a/1")
	must(t, err)
	if got.ConnDetails[0].Endpoint == "mutated" {
		t.Fatal("store shares the caller's ConnDetails slice")
	}
}
