package reconcile_test

import (
	"errors"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const failover = "gateway failover from cloud/n0"

// TestLinkAckKeepsCoreReset: while a create is out, the core resets the link (say a
// gateway failover) just between the reconciler's re-read and its write of the ack.
// The write must not turn the reset link Applied: the sync asks for a quick retry,
// and the next pass dials it again from the reset state.
func TestLinkAckKeepsCoreReset(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		l := r.link()
		// Hold the destination's claim (it too would mark the link Applied) until the
		// ack has been written.
		release := make(chan struct{})
		released := false
		releaseClaim := func() {
			if !released {
				released = true
				close(release)
			}
		}
		t.Cleanup(releaseClaim)
		injected := 0
		r.hooks.onLink(func(id string, u store.LinkUpdate) {
			switch {
			case u.DestNodeID != nil: // the claim
				select {
				case <-release:
				case <-r.ctx.Done():
				}
			case conditional(u.IfVersion, u.Status, store.LinkApplied) && injected == 0:
				injected++
				if _, err := r.hooks.Store.UpdateLink(r.ctx, id, store.LinkUpdate{
					Status: store.Ptr(store.LinkPending), StatusMessage: store.Ptr(failover),
				}); err != nil {
					t.Error(err)
				}
			}
		})
		err := r.links.Sync(r.ctx, l.SourceNodeID)
		if injected != 1 {
			t.Fatalf("the ack was written %d times with a precondition, want 1", injected)
		}
		if !errors.Is(err, reconcile.ErrRetrySoon) {
			t.Fatalf("sync: %v, want ErrRetrySoon", err)
		}
		if got := r.link(); got.Status != store.LinkPending || got.StatusMessage != failover {
			t.Fatalf("link %s (%q): the core's reset was overwritten", got.Status, got.StatusMessage)
		}
		r.hooks.onLink(nil)
		releaseClaim()
		r.converge()
	})
}

// TestLinkConnectingKeepsCoreChange: the core changes a link between the listing and
// the Pending -> Connecting write. Nothing is sent from the stale plan, the change is
// kept, and the sync asks for a quick retry.
func TestLinkConnectingKeepsCoreChange(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		l := r.link()
		r.hooks.onLink(func(id string, u store.LinkUpdate) {
			if conditional(u.IfVersion, u.Status, store.LinkConnecting) {
				r.hooks.onLink(nil)
				if _, err := r.hooks.Store.UpdateLink(r.ctx, id, store.LinkUpdate{StatusMessage: store.Ptr(failover)}); err != nil {
					t.Error(err)
				}
			}
		})
		err := r.links.Sync(r.ctx, l.SourceNodeID)
		if !errors.Is(err, reconcile.ErrRetrySoon) {
			t.Fatalf("sync: %v, want ErrRetrySoon", err)
		}
		if _, cmds := r.nodes.counts(l.SourceNodeID); cmds != 0 {
			t.Fatalf("%d commands sent from a stale plan", cmds)
		}
		if got := r.link(); got.Status != store.LinkPending || got.StatusMessage != failover {
			t.Fatalf("link %s (%q): the core's change was overwritten", got.Status, got.StatusMessage)
		}
		r.converge()
	})
}

// TestRouteAckKeepsCoreReset: the core resets a route between the reconciler's re-read
// after the subscribe ack and its write of Applied. The reset is kept, the sync asks
// for a quick retry, and the next pass finds the subscription active and applies it.
func TestRouteAckKeepsCoreReset(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		rt := r.route()
		r.unsubscribeBehindCP(rt)
		injected := 0
		r.hooks.onRoute(func(id int64, u store.RouteUpdate) {
			if conditional(u.IfVersion, u.Status, store.RouteApplied) && injected == 0 {
				injected++
				if _, err := r.hooks.Store.UpdateRoute(r.ctx, id, store.RouteUpdate{
					Status: store.Ptr(store.RoutePending), StatusMessage: store.Ptr(failover),
				}); err != nil {
					t.Error(err)
				}
			}
		})
		err := r.syncRoutes(rt.SourceNodeID)
		if injected != 1 {
			t.Fatalf("Applied written %d times with a precondition, want 1", injected)
		}
		if !errors.Is(err, reconcile.ErrRetrySoon) {
			t.Fatalf("sync: %v, want ErrRetrySoon", err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RoutePending || got.StatusMessage != failover {
			t.Fatalf("route %s (%q): the core's reset was overwritten", got.Status, got.StatusMessage)
		}
		r.hooks.onRoute(nil)
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteApplied || !r.subscribed(rt.SourceNodeID) {
			t.Fatalf("route %s after the retry", got.Status)
		}
	})
}
