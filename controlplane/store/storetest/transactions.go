package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

var errHalfway = errors.New("failed half-way")

// state is every record of a store, exactly as stored (times and versions included).
type state struct {
	Nodes    []store.Node
	Links    []store.Link
	Routes   []store.Route
	Segments []store.Segment
}

func snapshot(t *testing.T, ctx context.Context, s store.Store) state {
	t.Helper()
	var st state
	var err error
	st.Nodes, err = s.ListNodes(ctx, store.NodeFilter{})
	must(t, err)
	st.Links, err = s.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	st.Routes, err = s.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	st.Segments, err = s.ListSegments(ctx)
	must(t, err)
	return st
}

// writeEverything makes one write of every kind on top of fill's records, checking
// that each is visible to the next call made with the same context.
func writeEverything(t *testing.T, ctx context.Context, s store.Store) {
	t.Helper()
	must(t, s.SaveNode(ctx, node("c/1", "c", true, "c:443")))
	must(t, s.SetNodeConnected(ctx, "a/1", false))
	if n, err := s.GetNode(ctx, "a/1"); err != nil || n.Connected {
		t.Fatalf("inside the transaction the node reads %+v, %v", n, err)
	}
	must(t, s.CreateLink(ctx, link("2", "c/1", "b", "b/1")))
	l, err := s.UpdateLink(ctx, "1", store.LinkUpdate{Status: store.Ptr(store.LinkConnecting)})
	must(t, err)
	if l.Version != 2 {
		t.Fatalf("updated link at version %d, want 2", l.Version)
	}
	must(t, s.DeleteLinkIf(ctx, "2", 1))
	r, err := s.CreateRoute(ctx, expansion("c/1", "1", "b/1", nameB))
	must(t, err)
	routes, err := s.ListRoutes(ctx, store.RouteFilter{})
	must(t, err)
	if len(routes) != 2 {
		t.Fatalf("inside the transaction %d routes are listed, want 2", len(routes))
	}
	_, err = s.UpdateRoute(ctx, 1, store.RouteUpdate{SourceNodeID: store.Ptr("c/1")}) // re-key
	must(t, err)
	must(t, s.DeleteRouteIf(ctx, r.ID, 1))
	must(t, s.RemoveSegmentLink(ctx, store.NewSegmentLink("seg", "a", "b")))
	must(t, s.AddSegmentLink(ctx, store.NewSegmentLink("seg", "a", "c")))
	must(t, s.CreateSegment(ctx, "seg-2"))
	must(t, s.DeleteSegment(ctx, "seg"))
	must(t, s.DeleteNode(ctx, "a/1"))
	must(t, s.DeleteLink(ctx, "1"))
	must(t, s.DeleteRoute(ctx, 1))
	must(t, s.ClearAll(ctx))
	must(t, s.SaveNode(ctx, node("d/1", "d", true, "")))
}

// testTxRollback: a transaction that fails half-way — by returning an error or by
// panicking — leaves every record exactly as it was, whatever kinds of writes it made.
func testTxRollback(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	fill(t, ctx, s)
	before := snapshot(t, ctx, s)
	err := s.Atomically(ctx, func(ctx context.Context) error {
		writeEverything(t, ctx, s)
		return errHalfway
	})
	if !errors.Is(err, errHalfway) {
		t.Fatalf("Atomically returned %v, want fn's error", err)
	}
	equal(t, "state after a failed transaction", snapshot(t, ctx, s), before)

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("fn's panic was swallowed")
			}
		}()
		_ = s.Atomically(ctx, func(ctx context.Context) error {
			writeEverything(t, ctx, s)
			panic(errHalfway)
		})
	}()
	equal(t, "state after a panicking transaction", snapshot(t, ctx, s), before)
	// The store is still usable: nothing was left locked or open.
	must(t, s.SaveNode(ctx, node("e/1", "e", true, "")))
}

// testTxCommit: a successful transaction is visible as a whole — afterwards, and to a
// reader that runs while it is open (which sees all of it or none of it).
func testTxCommit(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	fill(t, ctx, s)
	type seen struct {
		links []store.Link
		err   error
	}
	read := make(chan seen, 1)
	err := s.Atomically(ctx, func(tctx context.Context) error {
		must(t, s.CreateLink(tctx, link("t1", "a/1", "c", "c/1")))
		must(t, s.CreateLink(tctx, link("t2", "a/1", "d", "d/1")))
		go func() { // outside the transaction
			ls, err := s.ListLinks(ctx, store.LinkFilter{})
			read <- seen{ls, err}
		}()
		// Give the reader a moment to run while the transaction is open; a store
		// that makes it wait for the commit is fine too.
		select {
		case r := <-read:
			read <- r
		case <-time.After(50 * time.Millisecond):
		}
		_, err := s.UpdateLink(tctx, "1", store.LinkUpdate{Status: store.Ptr(store.LinkConnecting)})
		return err
	})
	must(t, err)
	r := <-read
	must(t, r.err)
	if n := len(r.links); n != 1 && n != 3 {
		t.Fatalf("a reader saw %d links while the transaction adding 2 to 1 ran: half of it", n)
	}
	links, err := s.ListLinks(ctx, store.LinkFilter{})
	must(t, err)
	if len(links) != 3 || links[0].Status != store.LinkConnecting || links[0].Version != 2 {
		t.Fatalf("after commit: %+v", links)
	}
}

// testTxNested: a nested transaction that fails undoes only its own writes; one that
// succeeds commits with the outer one, and is undone with it.
func testTxNested(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	fill(t, ctx, s)
	err := s.Atomically(ctx, func(ctx context.Context) error {
		must(t, s.SaveNode(ctx, node("outer/1", "outer", true, "")))
		err := s.Atomically(ctx, func(ctx context.Context) error {
			must(t, s.SaveNode(ctx, node("inner/1", "inner", true, "")))
			must(t, s.ClearAll(ctx))
			return errHalfway
		})
		if !errors.Is(err, errHalfway) {
			t.Fatalf("nested Atomically returned %v", err)
		}
		if _, err := s.GetNode(ctx, "inner/1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("failed nested write still visible: %v", err)
		}
		if _, err := s.GetNode(ctx, "a/1"); err != nil {
			t.Fatalf("failed nested clear still visible: %v", err)
		}
		return s.Atomically(ctx, func(ctx context.Context) error {
			return s.SaveNode(ctx, node("inner/2", "inner", true, ""))
		})
	})
	must(t, err)
	nodes, err := s.ListNodes(ctx, store.NodeFilter{})
	must(t, err)
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	equal(t, "nodes after nested transactions", ids, []string{"a/1", "inner/2", "outer/1"})

	must(t, s.DeleteNode(ctx, "inner/2"))
	must(t, s.DeleteNode(ctx, "outer/1"))
	before := snapshot(t, ctx, s)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		must(t, s.Atomically(ctx, func(ctx context.Context) error {
			return s.SaveNode(ctx, node("inner/3", "inner", true, ""))
		}))
		return errHalfway
	})
	wantErr(t, err, errHalfway)
	equal(t, "state after the outer transaction failed", snapshot(t, ctx, s), before)
}

// testTxVersions: version preconditions hold inside a transaction against its own
// view; a write refused there changes nothing and the transaction may go on.
func testTxVersions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.CreateLink(ctx, link("v", "a/1", "b", "b/1")))
	err := s.Atomically(ctx, func(ctx context.Context) error {
		l, err := s.UpdateLink(ctx, "v", store.LinkUpdate{IfVersion: store.Ptr(int64(1)), DestNodeID: store.Ptr("b/2")})
		must(t, err)
		if l.Version != 2 {
			t.Fatalf("version inside the transaction %d, want 2", l.Version)
		}
		_, err = store.SetLinkStatusIf(ctx, s, "v", 1, store.LinkConnecting, "")
		wantErr(t, err, store.ErrConflict)
		wantErr(t, s.DeleteLinkIf(ctx, "v", 1), store.ErrConflict)
		got, err := s.GetLink(ctx, "v")
		must(t, err)
		if got.Version != 2 || got.Status != store.LinkPending || got.DestNodeID != "b/2" {
			t.Fatalf("a refused write inside the transaction changed the link: %+v", got)
		}
		_, err = store.SetLinkStatusIf(ctx, s, "v", 2, store.LinkConnecting, "")
		return err
	})
	must(t, err)
	got, err := s.GetLink(ctx, "v")
	must(t, err)
	if got.Version != 3 || got.Status != store.LinkConnecting {
		t.Fatalf("after commit: %+v", got)
	}
	// A reconciler that read version 3 before a transaction changed the link is
	// refused after the commit.
	must(t, s.Atomically(ctx, func(ctx context.Context) error {
		_, err := s.UpdateLink(ctx, "v", store.LinkUpdate{SourceNodeID: store.Ptr("a/2")})
		return err
	}))
	_, err = store.SetLinkStatusIf(ctx, s, "v", 3, store.LinkApplied, "")
	wantErr(t, err, store.ErrConflict)
}

// testTxLockAtFirstWrite: a transaction that has only read so far keeps no writer
// waiting; it sees that writer's change, and its own first write applies on top.
func testTxLockAtFirstWrite(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.CreateLink(ctx, link("w", "a/1", "b", "b/1")))
	err := s.Atomically(ctx, func(tctx context.Context) error {
		if _, err := s.GetLink(tctx, "w"); err != nil {
			return err
		}
		wrote := make(chan error, 1)
		go func() { // outside the transaction
			_, err := store.SetLinkStatusIf(ctx, s, "w", 1, store.LinkConnecting, "")
			wrote <- err
		}()
		select {
		case err := <-wrote:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("a writer waited for a transaction that had not written yet")
		}
		l, err := s.UpdateLink(tctx, "w", store.LinkUpdate{StatusMessage: store.Ptr("core")})
		if err != nil {
			return err
		}
		if l.Status != store.LinkConnecting || l.Version != 3 {
			t.Fatalf("the transaction's write did not apply on top of the other writer's: %+v", l)
		}
		return nil
	})
	must(t, err)
}

// testTxEnded: a transaction's context is dead once Atomically returns, and a closed
// store refuses to start one.
func testTxEnded(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var kept context.Context
	must(t, s.Atomically(ctx, func(ctx context.Context) error {
		kept = ctx
		return nil
	}))
	wantErr(t, s.SaveNode(kept, node("late/1", "late", true, "")), store.ErrTxDone)
	_, err := s.GetNode(kept, "late/1")
	wantErr(t, err, store.ErrTxDone)
	wantErr(t, s.Atomically(kept, func(context.Context) error { return nil }), store.ErrTxDone)
	must(t, s.Close())
	wantErr(t, s.Atomically(ctx, func(context.Context) error { return nil }), store.ErrClosed)
}
