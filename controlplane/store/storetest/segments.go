package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

func testSegments(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.CreateSegment(ctx, "tenant-b"))
	must(t, s.CreateSegment(ctx, "tenant-a"))
	wantErr(t, s.CreateSegment(ctx, "tenant-a"), store.ErrExists)
	must(t, s.AddSegmentLink(ctx, store.SegmentLink{Segment: "tenant-a", GroupA: "cloud", GroupB: "a"}))
	must(t, s.AddSegmentLink(ctx, store.SegmentLink{Segment: "tenant-a", GroupA: "cloud", GroupB: "z"}))
	// Edges are undirected: the reversed pair is the same edge.
	wantErr(t, s.AddSegmentLink(ctx, store.SegmentLink{Segment: "tenant-a", GroupA: "a", GroupB: "cloud"}), store.ErrExists)
	wantErr(t, s.AddSegmentLink(ctx, store.SegmentLink{Segment: "nope", GroupA: "a", GroupB: "b"}), store.ErrNotFound)

	segs, err := s.ListSegments(ctx)
	must(t, err)
	equal(t, "segments", segs, []store.Segment{
		{Name: "tenant-a", Links: []store.SegmentLink{
			{Segment: "tenant-a", GroupA: "a", GroupB: "cloud"},
			{Segment: "tenant-a", GroupA: "cloud", GroupB: "z"},
		}},
		{Name: "tenant-b", Links: []store.SegmentLink{}},
	})

	wantErr(t, s.RemoveSegmentLink(ctx, store.SegmentLink{Segment: "tenant-b", GroupA: "a", GroupB: "cloud"}), store.ErrNotFound)
	wantErr(t, s.RemoveSegmentLink(ctx, store.SegmentLink{Segment: "nope", GroupA: "a", GroupB: "cloud"}), store.ErrNotFound)
	must(t, s.RemoveSegmentLink(ctx, store.SegmentLink{Segment: "tenant-a", GroupA: "z", GroupB: "cloud"}))

	// Deleting a segment takes its links along: recreating it starts empty.
	must(t, s.DeleteSegment(ctx, "tenant-a"))
	wantErr(t, s.DeleteSegment(ctx, "tenant-a"), store.ErrNotFound)
	must(t, s.CreateSegment(ctx, "tenant-a"))
	segs, err = s.ListSegments(ctx)
	must(t, err)
	equal(t, "segments after delete", segs, []store.Segment{
		{Name: "tenant-a", Links: []store.SegmentLink{}},
		{Name: "tenant-b", Links: []store.SegmentLink{}},
	})
}

func fill(t *testing.T, ctx context.Context, s store.Store) {
	t.Helper()
	must(t, s.SaveNode(ctx, node("a/1", "a", true, "a:443")))
	must(t, s.CreateLink(ctx, link("1", "a/1", "b", "b/1")))
	_, err := s.CreateRoute(ctx, expansion("a/1", "1", "b/1", nameA))
	must(t, err)
	must(t, s.CreateSegment(ctx, "seg"))
	must(t, s.AddSegmentLink(ctx, store.NewSegmentLink("seg", "a", "b")))
}

func counts(t *testing.T, ctx context.Context, s store.Store) [4]int {
	t.Helper()
	ns, err := s.ListNodes(ctx, store.NodeFilter{})
	must(t, err)
	ls, err := s.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	rs, err := s.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	ss, err := s.ListSegments(ctx)
	must(t, err)
	return [4]int{len(ns), len(ls), len(rs), len(ss)}
}

func testClear(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	fill(t, ctx, s)
	must(t, s.ClearRuntime(ctx))
	if got := counts(t, ctx, s); got != [4]int{0, 0, 0, 1} {
		t.Fatalf("after ClearRuntime nodes/links/routes/segments = %v, want segments only", got)
	}
	segs, err := s.ListSegments(ctx)
	must(t, err)
	if len(segs[0].Links) != 1 {
		t.Fatalf("ClearRuntime dropped segment links: %+v", segs)
	}
	must(t, s.ClearAll(ctx))
	if got := counts(t, ctx, s); got != [4]int{} {
		t.Fatalf("after ClearAll counts = %v", got)
	}
}

// testConcurrent races reconciler-style updates against a mark-delete on the same link
// and creates on distinct records: nothing fails but the losers of the state machine,
// and a deleted link stays deleted.
func testConcurrent(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const n = 8
	for i := range n {
		must(t, s.CreateLink(ctx, link(fmt.Sprint(i), "a/1", "b", "b/1")))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		id := fmt.Sprint(i)
		wg.Add(3)
		go func() {
			defer wg.Done()
			for _, st := range []store.LinkStatus{store.LinkConnecting, store.LinkApplied} {
				if _, err := store.SetLinkStatus(ctx, s, id, st, ""); err != nil && !errorsIs(err, store.ErrInvalidTransition) {
					errs <- err
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := store.MarkLinkDeleted(ctx, s, id); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := s.CreateRoute(ctx, expansion("a/1", id, "b/1", nameA)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ls, err := s.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	must(t, err)
	for _, l := range ls {
		if !l.Deleted || l.Status != store.LinkDeleted {
			t.Errorf("link %s revived after mark-delete: %s", l.ID, l.Status)
		}
	}
	rs, err := s.ListRoutes(ctx, store.RouteFilter{})
	must(t, err)
	if len(rs) != n {
		t.Errorf("%d routes, want %d", len(rs), n)
	}
}

func testClosed(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.Close())
	must(t, s.Close())
	_, err := s.GetNode(ctx, "a/1")
	wantErr(t, err, store.ErrClosed)
	wantErr(t, s.SaveNode(ctx, node("a/1", "a", true, "")), store.ErrClosed)
	_, err = s.ListLinks(ctx, store.LinkFilter{})
	wantErr(t, err, store.ErrClosed)
	_, err = s.CreateRoute(ctx, expansion("a/1", "1", "b/1", nameA))
	wantErr(t, err, store.ErrClosed)
	wantErr(t, s.ClearRuntime(ctx), store.ErrClosed)
}
