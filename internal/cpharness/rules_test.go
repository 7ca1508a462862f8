package cpharness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// counter reads a counter of the registry, 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(labels)
}

// TestConnectionLostBeforeFirstSubscribe runs the TOCTOU race through the real work
// queues: every gateway loses its connection right before its first subscribe. The
// route reconciler requeues without consuming a retry, the link is reset and dialled
// again, and everything converges.
func TestConnectionLostBeforeFirstSubscribe(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		reg := prometheus.NewRegistry()
		c := startCP(t, testConfig(t, db, starTopology), func(o *server.Options) { o.Metrics = reg })
		f := newFabric(t)
		nodes := startNodes(t, f, c, 1, "cloud", "edge-a", "edge-b")
		converge(t, c, f, true)
		for _, n := range nodes {
			n.DropBeforeSubscribe("")
		}
		announce(t, f, c, "edge-a/n1", "edge-b/n1")
		converge(t, c, f, true)
		if n := counter(t, reg, "switchboard_controlplane_reconcile_errors_total", map[string]string{"queue": "route", "kind": "retry"}); n == 0 {
			t.Fatal("no route reconcile was retried for a lost connection")
		}
		redialled := 0
		for _, n := range connects(f) {
			if n > 1 {
				redialled++
			}
		}
		if redialled == 0 {
			t.Fatalf("no link dialled again: %v", connects(f))
		}
	})
}

// TestWithdrawAndComponentID: an announcement with a component id is routed with it;
// withdrawing an announcement removes its routes from the datapaths.
func TestWithdrawAndComponentID(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		c := startCP(t, testConfig(t, db, starTopology))
		f := newFabric(t)
		startNodes(t, f, c, 2, "cloud", "edge-a", "edge-b")
		if err := f.WaitRegistered(timeout(t, 20e9)); err != nil {
			t.Fatal(err)
		}
		withID := svcName.WithID(7)
		if err := f.Node("edge-a/n1").Announce(withID); err != nil {
			t.Fatal(err)
		}
		if err := f.Node("edge-b/n2").Announce(svcName); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		converge(t, c, f, true, func() error {
			ids, total := 0, 0
			for _, r := range routesOf(t, c.Store()) {
				total++
				if r.Name.HasID && r.Name.ID == 7 {
					ids++
				}
			}
			if ids == 0 || ids == total {
				return fmt.Errorf("%d of %d routes with component id 7: want some with and some without", ids, total)
			}
			return nil
		})
		if err := f.Node("edge-a/n1").Withdraw(withID); err != nil {
			t.Fatal(err)
		}
		err := Eventually(timeout(t, 20e9), func() error {
			tpls, _ := c.Store().ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes})
			if len(tpls) != 1 || tpls[0].DestNodeID != "edge-b/n2" {
				return store.NotFound("only the template of edge-b/n2", "")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		converge(t, c, f, true)
		for _, r := range routesOf(t, c.Store()) {
			if r.Name.HasID {
				t.Fatalf("route %d for the withdrawn name left", r.ID)
			}
		}
	})
}

// TestLateSubscriptionAcks: every datapath acknowledges subscribes only after its
// controller's ack timer fired, so each first subscribe is reported failed although
// the node keeps the subscription. Through the real work queues every route must
// still end Applied (the retry finds the subscription active), with no status change
// refused by the store on the way.
func TestLateSubscriptionAcks(t *testing.T) {
	const ackTimeout = 100 * time.Millisecond
	forStores(t, func(t *testing.T, db string) {
		reg := prometheus.NewRegistry()
		c := startCP(t, testConfig(t, db, starTopology), func(o *server.Options) { o.Metrics = reg })
		f := newFabric(t)
		for _, g := range []string{"cloud", "edge-a", "edge-b"} {
			n, err := f.Start(NodeConfig{Group: g, ID: "n1", Target: c.SouthboundAddr(), AckTimeout: ackTimeout})
			if err != nil {
				t.Fatal(err)
			}
			n.Datapath().DelayAcks(3 * ackTimeout)
		}
		converge(t, c, f, true)
		announce(t, f, c, "edge-a/n1", "edge-b/n1")
		converge(t, c, f, true)
		routeErrors := func(kind string) float64 {
			return counter(t, reg, "switchboard_controlplane_reconcile_errors_total", map[string]string{"queue": "route", "kind": kind})
		}
		if routeErrors("error") == 0 {
			t.Fatal("no subscribe failed on its ack timeout: the test did not stage late acks")
		}
		if n := routeErrors("rejected_transition"); n != 0 {
			t.Fatalf("%v status changes refused by the store", n)
		}
	})
}
