package reconcile_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// TestRouteLateAck: the datapath acknowledges a subscribe after the node's ack timer
// fired. The node reported the subscribe failed, so the route is Failed, yet the
// datapath keeps the subscription. The next pass finds it active and must bring the
// route to Applied — through Pending, as the state machine requires — without
// subscribing again.
func TestRouteLateAck(t *testing.T) {
	const ackTimeout = 100 * time.Millisecond
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false, func(c *cpharness.NodeConfig) { c.AckTimeout = ackTimeout })
		r.converge()
		rt := r.route()
		r.unsubscribeBehindCP(rt)
		dp := r.node(rt.SourceNodeID).Datapath()
		dp.DelayAcks(4 * ackTimeout)
		err := r.syncRoutes(rt.SourceNodeID)
		if err == nil || !strings.Contains(err.Error(), "ack timeout") {
			t.Fatalf("sync with a late ack: %v, want the ack timeout", err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteFailed {
			t.Fatalf("route %s (%q) after the ack timeout, want failed", got.Status, got.StatusMessage)
		}
		if !r.subscribed(rt.SourceNodeID) {
			t.Fatal("rig: the datapath did not keep the late subscription")
		}
		dp.DelayAcks(0)
		r.resetCounts()

		var (
			mu    sync.Mutex
			steps []store.RouteStatus
		)
		r.hooks.onRoute(func(id int64, u store.RouteUpdate) {
			if id == rt.ID && u.Status != nil {
				mu.Lock()
				steps = append(steps, *u.Status)
				mu.Unlock()
			}
		})
		t.Cleanup(func() { r.hooks.onRoute(nil) })
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatalf("sync after the late ack: %v", err)
		}
		got, _ := r.st.GetRoute(r.ctx, rt.ID)
		if got.Status != store.RouteApplied || got.StatusMessage != "" {
			t.Fatalf("route %s (%q) after the late ack landed, want applied", got.Status, got.StatusMessage)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []store.RouteStatus{store.RoutePending, store.RouteApplied}; !equalSteps(steps, want) {
			t.Fatalf("route went through %v, want %v", steps, want)
		}
		if _, cmds := r.nodes.counts(rt.SourceNodeID); cmds != 0 {
			t.Fatalf("%d commands sent; the subscription is active, none is needed", cmds)
		}
	})
}

func equalSteps(a, b []store.RouteStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRejectedTransitionIsAnError: a status change the store refuses as invalid is
// logged at warn and fails the pass with an error that is not a quick, uncounted
// retry: the queue backs off, retries and counts it. Once the store accepts the write
// again the route reaches Applied.
func TestRejectedTransitionIsAnError(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		rt := r.route()
		r.unsubscribeBehindCP(rt)
		r.hooks.onRouteRefuse(func(id int64, u store.RouteUpdate) error {
			if id == rt.ID && u.Status != nil && *u.Status == store.RouteApplied {
				return fmt.Errorf("%w: route %d: injected", store.ErrInvalidTransition, id)
			}
			return nil
		})
		err := r.syncRoutes(rt.SourceNodeID)
		if !errors.Is(err, store.ErrInvalidTransition) || errors.Is(err, reconcile.ErrRetrySoon) {
			t.Fatalf("sync: %v, want an error wrapping ErrInvalidTransition (and not a quick retry)", err)
		}
		if !slices.ContainsFunc(r.warnings.messages(), func(m string) bool { return strings.Contains(m, "rejected") }) {
			t.Fatalf("no warning about the rejected change; warnings: %q", r.warnings.messages())
		}
		r.hooks.onRouteRefuse(nil)
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteApplied {
			t.Fatalf("route %s after the retry, want applied", got.Status)
		}
	})
}
