package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

// TestTally: the counts follow creates, status changes, deletes and a rolled-back
// transaction.
func TestTally(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	name := store.NewName("o", "n", "s")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := func(lt memory.LinkTally, rt memory.RouteTally) {
		t.Helper()
		if gl, gr := s.Tally(); gl != lt || gr != rt {
			t.Fatalf("tally = %+v %+v, want %+v %+v", gl, gr, lt, rt)
		}
	}
	must(s.CreateLink(ctx, store.Link{ID: "l1", SourceNodeID: "a/1", Status: store.LinkPending}))
	_, err := s.CreateRoute(ctx, store.Route{SourceNodeID: store.AllNodes, DestNodeID: "a/1", Name: name, Status: store.RouteApplied})
	must(err)
	r, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "b/1", LinkID: "l1", Name: name, Status: store.RoutePending})
	must(err)
	want(memory.LinkTally{Links: 1}, memory.RouteTally{Templates: 1, Expansions: 1})
	_, err = store.SetLinkStatus(ctx, s, "l1", store.LinkApplied, "")
	must(err)
	_, err = s.UpdateLink(ctx, "l1", store.LinkUpdate{DestNodeID: store.Ptr("b/1")})
	must(err)
	_, err = store.MarkRouteApplied(ctx, s, r.ID)
	must(err)
	want(memory.LinkTally{Links: 1, LinksAppliedClaimed: 1}, memory.RouteTally{Templates: 1, Expansions: 1, ExpansionsApplied: 1})
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if _, err := store.MarkRouteDeleted(ctx, s, r.ID); err != nil {
			return err
		}
		return errors.New("undo")
	})
	if err == nil {
		t.Fatal("transaction did not fail")
	}
	want(memory.LinkTally{Links: 1, LinksAppliedClaimed: 1}, memory.RouteTally{Templates: 1, Expansions: 1, ExpansionsApplied: 1})
	_, err = store.MarkRouteDeleted(ctx, s, r.ID)
	must(err)
	must(s.DeleteLink(ctx, "l1"))
	want(memory.LinkTally{}, memory.RouteTally{Templates: 1, Expansions: 1})
	must(s.DeleteRoute(ctx, r.ID))
	want(memory.LinkTally{}, memory.RouteTally{Templates: 1})
}
