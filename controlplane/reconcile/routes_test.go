package reconcile_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// unsubscribeBehindCP removes the route's subscription from the node's datapath
// without its controller knowing.
func (r *rig) unsubscribeBehindCP(rt store.Route) {
	r.t.Helper()
	dp := r.node(rt.SourceNodeID).Datapath()
	for _, si := range dp.Subscriptions() {
		if si.Name == dataplane.NewName("org", "ns", "svc") {
			if err := dp.Unsubscribe(r.ctx, si.Conn, si.ID); err != nil {
				r.t.Fatal(err)
			}
			return
		}
	}
	r.t.Fatalf("no subscription for route %d", rt.ID)
}

func (r *rig) subscribed(node string) bool {
	return len(r.node(node).Datapath().Subscriptions()) > 0
}

func (r *rig) syncRoutes(node string) error { return r.routes.Sync(r.ctx, node) }

// TestRouteDeleted: a deleted route still on the node is unsubscribed and
// hard-deleted; one already gone is hard-deleted without a command; one whose
// subscription vanishes between the pre-flight and the unsubscribe ("subscription not
// found") is hard-deleted as well.
func TestRouteDeleted(t *testing.T) {
	for _, how := range []string{"present", "absent", "vanishes"} {
		t.Run(how, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, false)
				r.converge()
				rt := r.route()
				if how == "absent" {
					r.unsubscribeBehindCP(rt)
				}
				if how == "vanishes" {
					r.nodes.onCommand(func(string, *controllerv1.ConfigCommand) { r.unsubscribeBehindCP(rt) })
				}
				if _, err := store.MarkRouteDeleted(r.ctx, r.st, rt.ID); err != nil {
					t.Fatal(err)
				}
				if err := r.syncRoutes(rt.SourceNodeID); err != nil {
					t.Fatal(err)
				}
				if _, err := r.st.GetRoute(r.ctx, rt.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("route not hard-deleted: %v", err)
				}
				if _, cmds := r.nodes.counts(rt.SourceNodeID); cmds != map[string]int{"present": 1, "absent": 0, "vanishes": 1}[how] {
					t.Fatalf("%d commands sent", cmds)
				}
				if r.subscribed(rt.SourceNodeID) {
					t.Fatal("subscription left on the node")
				}
			})
		})
	}
}

// TestRouteLinkStates: a route whose link is missing is skipped; over a Failed link it
// fails; over a link not Applied yet it waits and pokes the link reconciler; over an
// Applied link that is not live on the node it goes back to the link reconciler of the
// link's source — resetting the link to Pending when the route sits on the
// destination side, where the source still holds its end. None of them sends a
// command.
func TestRouteLinkStates(t *testing.T) {
	for _, state := range []string{"missing", "failed", "pending", "not live at destination", "not live at source"} {
		t.Run(state, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, false)
				r.converge()
				rt, l := r.route(), r.link()
				if rt.SourceNodeID != l.DestNodeID {
					t.Fatalf("rig: route %+v is not on the destination of link %+v", rt, l)
				}
				r.unsubscribeBehindCP(rt)
				if _, err := store.SetRouteStatus(r.ctx, r.st, rt.ID, store.RoutePending, ""); err != nil {
					t.Fatal(err)
				}
				switch state {
				case "missing":
					if err := r.st.DeleteLink(r.ctx, l.ID); err != nil {
						t.Fatal(err)
					}
				case "failed":
					for _, st := range []store.LinkStatus{store.LinkPending, store.LinkConnecting, store.LinkFailed} {
						if _, err := store.SetLinkStatus(r.ctx, r.st, l.ID, st, "handshake refused"); err != nil {
							t.Fatal(err)
						}
					}
				case "pending":
					if _, err := store.SetLinkStatus(r.ctx, r.st, l.ID, store.LinkPending, ""); err != nil {
						t.Fatal(err)
					}
				case "not live at destination":
					r.node(l.DestNodeID).DropLink(l.ID)
				case "not live at source":
					var err error
					rt, err = r.st.CreateRoute(r.ctx, store.Route{SourceNodeID: l.SourceNodeID, DestNodeID: l.DestNodeID,
						LinkID: l.ID, Name: store.NewName("org", "ns", "other"), Status: store.RoutePending})
					if err != nil {
						t.Fatal(err)
					}
					r.node(l.SourceNodeID).DropLink(l.ID)
				}
				if err := r.syncRoutes(rt.SourceNodeID); err != nil {
					t.Fatal(err)
				}
				if _, cmds := r.nodes.counts(rt.SourceNodeID); cmds != 0 {
					t.Fatalf("%d commands sent", cmds)
				}
				got, _ := r.st.GetRoute(r.ctx, rt.ID)
				linkPokes, _ := r.pokes()
				want := store.RoutePending
				if state == "failed" {
					want = store.RouteFailed
				}
				if got.Status != want {
					t.Fatalf("route is %s (%q), want %s", got.Status, got.StatusMessage, want)
				}
				if state == "failed" && !strings.Contains(got.StatusMessage, "handshake refused") {
					t.Fatalf("failed route message %q", got.StatusMessage)
				}
				poked := slices.Contains(linkPokes, l.SourceNodeID)
				if want := strings.HasPrefix(state, "not live") || state == "pending"; poked != want {
					t.Fatalf("link reconciler poked %v (%v), want %v", poked, linkPokes, want)
				}
				nl, _ := r.st.GetLink(r.ctx, l.ID)
				switch {
				case state == "not live at destination" && nl.Status != store.LinkPending:
					t.Fatalf("link not reset: %s", nl.Status)
				case state == "not live at source" && nl.Status != store.LinkApplied:
					t.Fatalf("link %s: the source's own link reconciler finds it down, no reset needed", nl.Status)
				}
				if state == "missing" {
					return
				}
				if state == "not live at source" {
					if err := r.st.DeleteRoute(r.ctx, rt.ID); err != nil {
						t.Fatal(err)
					}
				}
				r.converge() // the link reconciler brings it back, then the route
			})
		})
	}
}

// TestRouteAlreadyActive: a route whose subscription is live is marked Applied without
// a command.
func TestRouteAlreadyActive(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		rt := r.route()
		if _, err := store.SetRouteStatus(r.ctx, r.st, rt.ID, store.RoutePending, ""); err != nil {
			t.Fatal(err)
		}
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteApplied {
			t.Fatalf("route %s", got.Status)
		}
		if req, cmds := r.nodes.counts(rt.SourceNodeID); req != 2 || cmds != 0 {
			t.Fatalf("%d requests, %d commands; want the two pre-flight lists only", req, cmds)
		}
	})
}

// TestRouteSubscribe: success -> Applied; another failure -> Failed with the node's
// message and an error to retry, after which it goes Failed -> Pending -> Applied.
func TestRouteSubscribe(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		rt := r.route()
		r.unsubscribeBehindCP(rt)
		dp := r.node(rt.SourceNodeID).Datapath()
		dp.RejectAcks(errors.New("subscription quota exceeded"))
		err := r.syncRoutes(rt.SourceNodeID)
		if err == nil || errors.Is(err, reconcile.ErrRetrySoon) || !strings.Contains(err.Error(), "quota exceeded") {
			t.Fatalf("sync: %v", err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteFailed || !strings.Contains(got.StatusMessage, "quota exceeded") {
			t.Fatalf("route %s (%q)", got.Status, got.StatusMessage)
		}
		dp.RejectAcks(nil)
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RouteApplied || !r.subscribed(rt.SourceNodeID) {
			t.Fatalf("route %s after retry", got.Status)
		}
	})
}

// TestRouteConnectionLostBeforeSubscribe: the connection breaks between the
// pre-flight check and the subscribe. The route stays Pending, the sync asks for a
// retry that does not count (ErrRetrySoon), and the next passes reset the link,
// recreate it and subscribe.
func TestRouteConnectionLostBeforeSubscribe(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		rt, l := r.route(), r.link()
		r.unsubscribeBehindCP(rt)
		r.node(rt.SourceNodeID).DropBeforeSubscribe(l.ID)
		err := r.syncRoutes(rt.SourceNodeID)
		if !errors.Is(err, reconcile.ErrRetrySoon) {
			t.Fatalf("sync: %v, want ErrRetrySoon", err)
		}
		if got, _ := r.st.GetRoute(r.ctx, rt.ID); got.Status != store.RoutePending {
			t.Fatalf("route %s (%q), want pending", got.Status, got.StatusMessage)
		}
		if err := r.syncRoutes(rt.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if links, _ := r.pokes(); !slices.Contains(links, l.SourceNodeID) {
			t.Fatalf("link reconciler not poked: %v", links)
		}
		r.converge()
	})
}

// TestRouteOrphans: a subscription the store does not know is removed, with orphan
// detection or without (the spec's route reconciler always removes them; the option
// is about connections).
func TestRouteOrphans(t *testing.T) {
	for _, orphans := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[orphans], func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, orphans)
				r.converge()
				rt := r.route()
				if err := r.st.DeleteRoute(r.ctx, rt.ID); err != nil {
					t.Fatal(err)
				}
				// A route still in the store keeps the pass from skipping the node.
				other := store.NewName("org", "ns", "other")
				if _, err := r.st.CreateRoute(r.ctx, store.Route{SourceNodeID: rt.SourceNodeID, DestNodeID: rt.DestNodeID,
					LinkID: rt.LinkID, Name: other, Status: store.RoutePending}); err != nil {
					t.Fatal(err)
				}
				if err := r.syncRoutes(rt.SourceNodeID); err != nil {
					t.Fatal(err)
				}
				kept := slices.ContainsFunc(r.node(rt.SourceNodeID).Datapath().Subscriptions(), func(s dataplane.SubInfo) bool {
					return s.Name == svcName
				})
				if kept {
					t.Fatalf("orphan detection %v: untracked subscription kept", orphans)
				}
			})
		})
	}
}

// TestNullComponentNormalised: the data plane's NULL_COMPONENT is "no component id".
func TestNullComponentNormalised(t *testing.T) {
	null := uint64(math.MaxUint64)
	seven := uint64(7)
	plain := reconcile.NameFromProto(&controllerv1.Subscription{Component_0: "a", Component_1: "b", Component_2: "c"})
	nulled := reconcile.NameFromProto(&controllerv1.Subscription{Component_0: "a", Component_1: "b", Component_2: "c", ComponentId: &null})
	withID := reconcile.NameFromProto(&controllerv1.Subscription{Component_0: "a", Component_1: "b", Component_2: "c", ComponentId: &seven})
	if plain != nulled || plain.HasID {
		t.Fatalf("NULL_COMPONENT not normalised: %+v vs %+v", nulled, plain)
	}
	if !withID.HasID || withID.ID != 7 {
		t.Fatalf("component id lost: %+v", withID)
	}
	if p := reconcile.SubscriptionProto(plain, "L"); p.ComponentId != nil || p.GetLinkId() != "L" {
		t.Fatalf("wire form of a name without id: %v", p)
	}
	if p := reconcile.SubscriptionProto(withID, ""); p.GetComponentId() != 7 {
		t.Fatalf("wire form with id: %v", p)
	}
}

// TestRouteLeavesSubscriptionsOfUnknownLinks: a subscription over a link the store has
// no record of (after a restart, nodes still name connections by old link ids) is the
// link reconciler's to hand over or remove; the route reconciler leaves it, so
// delivery over a connection about to be handed over is not cut.
func TestRouteLeavesSubscriptionsOfUnknownLinks(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, true)
		r.converge()
		rt := r.route()
		if err := r.st.DeleteRoute(r.ctx, rt.ID); err != nil {
			t.Fatal(err)
		}
		if err := r.st.DeleteLink(r.ctx, rt.LinkID); err != nil {
			t.Fatal(err)
		}
		// A route still in the store keeps the pass from skipping the node.
		other := store.NewName("org", "ns", "other")
		if _, err := r.st.CreateRoute(r.ctx, store.Route{SourceNodeID: rt.SourceNodeID, DestNodeID: rt.DestNodeID,
			LinkID: "not-yet-made", Name: other, Status: store.RoutePending}); err != nil {
			t.Fatal(err)
		}
		_ = r.syncRoutes(rt.SourceNodeID)
		kept := slices.ContainsFunc(r.node(rt.SourceNodeID).Datapath().Subscriptions(), func(s dataplane.SubInfo) bool {
			return s.Name == svcName
		})
		if !kept {
			t.Fatalf("subscription over unknown link %s deleted by the route reconciler", rt.LinkID)
		}
	})
}

// TestRouteKeepsSubscriptionsOverAdoptedLinks: after a partition of the control plane
// the publisher's routes are gone from the store while its node still forwards; an
// untracked subscription over a link the control plane adopted stays while the far
// end is away, and goes as before otherwise: once the far end is back, a name nobody
// announces is not kept for the link's life.
func TestRouteKeepsSubscriptionsOverAdoptedLinks(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		adopted, announced, farGone bool
		kept                        bool
	}{
		{"adopted, far end back, name unannounced", true, false, false, false},
		{"adopted, far end away, name unannounced", true, false, true, true},
		{"adopted, far end away", true, true, true, true},
		{"adopted, name announced", true, true, false, false},
		{"not adopted", false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, true)
				r.converge()
				rt := r.route()
				if err := r.st.DeleteRoute(r.ctx, rt.ID); err != nil {
					t.Fatal(err)
				}
				if !tc.announced {
					tpls, err := r.st.ListRoutes(r.ctx, store.RouteFilter{SourceNodeID: store.AllNodes})
					if err != nil || len(tpls) != 1 {
						t.Fatalf("templates %v, %v", tpls, err)
					}
					if err := r.st.DeleteRoute(r.ctx, tpls[0].ID); err != nil {
						t.Fatal(err)
					}
				}
				if tc.adopted {
					if _, err := r.st.UpdateLink(r.ctx, rt.LinkID, store.LinkUpdate{StatusMessage: store.Ptr(store.LinkAdopted)}); err != nil {
						t.Fatal(err)
					}
				}
				if tc.farGone {
					l, err := r.st.GetLink(r.ctx, rt.LinkID)
					if err != nil {
						t.Fatal(err)
					}
					if err := r.st.SetNodeConnected(r.ctx, l.SourceNodeID, false); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.syncRoutes(rt.SourceNodeID); err != nil {
					t.Fatal(err)
				}
				kept := slices.ContainsFunc(r.node(rt.SourceNodeID).Datapath().Subscriptions(), func(s dataplane.SubInfo) bool {
					return s.Name == svcName
				})
				if kept != tc.kept {
					t.Fatalf("untracked subscription over link %s kept %v, want %v", rt.LinkID, kept, tc.kept)
				}
			})
		})
	}
}
