package reconcile_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

func count(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// TestLinkPreflight: a node recorded as disconnected is skipped without a request.
func TestLinkPreflight(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		src := r.link().SourceNodeID
		if err := r.st.SetNodeConnected(r.ctx, src, false); err != nil {
			t.Fatal(err)
		}
		if err := r.links.Sync(r.ctx, src); err != nil {
			t.Fatal(err)
		}
		if err := r.routes.Sync(r.ctx, src); err != nil {
			t.Fatal(err)
		}
		if req, _ := r.nodes.counts(src); req != 0 {
			t.Fatalf("%d requests to a disconnected node", req)
		}
	})
}

// TestLinkCreateThenIdempotent: a desired link is created, Applied, and both ends
// queued for routes; once Applied and live it is never sent again.
func TestLinkCreateThenIdempotent(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		l := r.link()
		if l.Status != store.LinkPending {
			t.Fatalf("new link is %s", l.Status)
		}
		if err := r.links.Sync(r.ctx, l.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got := r.link(); got.Status != store.LinkApplied {
			t.Fatalf("created link is %s (%s)", got.Status, got.StatusMessage)
		}
		r.converge()
		before := ops(r.node(l.SourceNodeID))
		if err := r.links.Sync(r.ctx, l.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if req, cmds := r.nodes.counts(l.SourceNodeID); req != 1 || cmds != 0 {
			t.Fatalf("idempotent pass made %d requests, %d commands; want the connection list only", req, cmds)
		}
		if after := ops(r.node(l.SourceNodeID)); len(after) != len(before) {
			t.Fatalf("datapath touched: %v", after[len(before):])
		}
		_, routes := r.pokes()
		l = r.link()
		if !slices.Contains(routes, l.SourceNodeID) || !slices.Contains(routes, l.DestNodeID) {
			t.Fatalf("route reconcile queued for %v, want both ends of %s", routes, l.ID)
		}
	})
}

// TestLinkCreateFailure: the node's error marks the link Failed with its message and
// asks for a retry; the retry applies it.
func TestLinkCreateFailure(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		l := r.link()
		dp := r.node(l.SourceNodeID).Datapath()
		dp.FailConnect("", errors.New("no route to host"))
		err := r.links.Sync(r.ctx, l.SourceNodeID)
		if err == nil || !strings.Contains(err.Error(), "no route to host") {
			t.Fatalf("sync: %v", err)
		}
		if got := r.link(); got.Status != store.LinkFailed || !strings.Contains(got.StatusMessage, "no route to host") {
			t.Fatalf("link %s (%q), want failed with the node's message", got.Status, got.StatusMessage)
		}
		dp.FailConnect("", nil)
		if err := r.links.Sync(r.ctx, l.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got := r.link(); got.Status != store.LinkApplied || got.StatusMessage != "" {
			t.Fatalf("retried link %s (%q)", got.Status, got.StatusMessage)
		}
	})
}

// TestLinkDelete: a deleted link live on the node is disconnected and hard-deleted;
// one already gone answers "connection not found", also a hard delete.
func TestLinkDelete(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(map[bool]string{true: "live", false: "gone"}[live], func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, false)
				r.converge()
				l := r.link()
				src := r.node(l.SourceNodeID)
				if !live {
					src.DropLink(l.ID)
				}
				if _, err := store.MarkLinkDeleted(r.ctx, r.st, l.ID); err != nil {
					t.Fatal(err)
				}
				before := ops(src)
				if err := r.links.Sync(r.ctx, l.SourceNodeID); err != nil {
					t.Fatal(err)
				}
				if _, err := r.st.GetLink(r.ctx, l.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("link not hard-deleted: %v", err)
				}
				if n := count(ops(src)[len(before):], "disconnect "+l.ID); n != map[bool]int{true: 1, false: 0}[live] {
					t.Fatalf("%d disconnects of %s", n, l.ID)
				}
				if len(src.Datapath().Connections()) != 0 || len(r.node(l.DestNodeID).Datapath().Connections()) != 0 {
					t.Fatal("connection left on a datapath")
				}
			})
		})
	}
}

// TestLinkResetIsRecreated: a link someone reset to Pending while it is still live
// (say its destination endpoint changed) is disconnected and dialled again.
func TestLinkResetIsRecreated(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		l := r.link()
		if _, err := store.SetLinkStatus(r.ctx, r.st, l.ID, store.LinkPending, "destination endpoint changed"); err != nil {
			t.Fatal(err)
		}
		src := r.node(l.SourceNodeID)
		before := ops(src)
		if err := r.links.Sync(r.ctx, l.SourceNodeID); err != nil {
			t.Fatal(err)
		}
		if got := ops(src)[len(before):]; count(got, "disconnect "+l.ID) != 1 || count(got, "connect "+l.ID) != 1 {
			t.Fatalf("ops %v, want one disconnect and one connect", got)
		}
		r.converge()
	})
}

// TestLinkOrphans: with orphan detection, connections the CP does not track are
// deleted, but not the connections a node accepted for its links; without it they
// stay. One to the very endpoint a link must dial is not deleted either way: the data
// plane hands it over to the link (relabelled on both ends, claimed by the far end).
func TestLinkOrphans(t *testing.T) {
	for _, orphans := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[orphans], func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				r := newRig(t, db, orphans)
				r.converge()
				r.lenient = !orphans
				l := r.link()
				src, dst := r.node(l.SourceNodeID), r.node(l.DestNodeID)
				if _, err := src.Datapath().Connect(r.ctx, "foreign", "10.9.9.9:443", []byte("{}")); err != nil {
					t.Fatal(err)
				}
				for _, n := range []string{src.ID(), dst.ID()} {
					if err := r.links.Sync(r.ctx, n); err != nil {
						t.Fatal(err)
					}
				}
				has := func(id string) bool {
					return slices.ContainsFunc(src.Datapath().Connections(), func(c dataplaneConn) bool { return c.LinkID == id })
				}
				if has("foreign") == orphans {
					t.Fatalf("orphan detection %v: foreign connection kept %v", orphans, has("foreign"))
				}
				if err := e2eConverged(r); err != nil {
					t.Fatalf("tracked connections must survive orphan detection: %v", err)
				}

				// A stale connection to the endpoint of a link that must be dialled again.
				src.DropLink(l.ID)
				staleID, err := src.Datapath().Connect(r.ctx, "stale", l.DestEndpoint, []byte("{}"))
				if err != nil {
					t.Fatal(err)
				}
				var sent *controllerv1.ConfigCommand
				r.nodes.onCommand(func(_ string, cmd *controllerv1.ConfigCommand) { sent = cmd })
				if err := r.links.Sync(r.ctx, src.ID()); err != nil {
					t.Fatal(err)
				}
				if sent == nil || slices.Contains(sent.GetConnectionsToDelete(), "stale") {
					t.Fatalf("stale connection to %s deleted instead of handed over: command %v", l.DestEndpoint, sent)
				}
				handed := slices.ContainsFunc(src.Datapath().Connections(), func(c dataplaneConn) bool { return c.ID == staleID && c.LinkID == l.ID })
				if has("stale") || !handed {
					t.Fatalf("stale connection to %s not handed over to link %s: %+v", l.DestEndpoint, l.ID, src.Datapath().Connections())
				}
				r.converge()
			})
		})
	}
}

// TestLinkLeftovers: without orphan detection, a connection between two nodes the
// control plane manages, in different groups, that no link accounts for is left over
// (from before a restart of the control plane, or a failover) and is deleted, at
// whichever end holds it; a connection to anything else stays.
func TestLinkLeftovers(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		r := newRig(t, db, false)
		r.converge()
		r.lenient = true
		l := r.link()
		src, dst := r.node(l.SourceNodeID), r.node(l.DestNodeID)
		if _, err := src.Datapath().Connect(r.ctx, "leftover-out", l.DestEndpoint, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		dst.Datapath().Accept("leftover-in", src.ID())
		if _, err := src.Datapath().Connect(r.ctx, "foreign", "10.9.9.9:443", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{src.ID(), dst.ID()} {
			if err := r.links.Sync(r.ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		has := func(n *cpharness.Node, id string) bool {
			return slices.ContainsFunc(n.Datapath().Connections(), func(c dataplaneConn) bool { return c.LinkID == id })
		}
		switch {
		case has(src, "leftover-out"):
			t.Fatal("a leftover connection to another group's node was kept")
		case has(dst, "leftover-in"):
			t.Fatal("a leftover connection accepted from another group's node was kept")
		case !has(src, "foreign"):
			t.Fatal("a connection the control plane did not make was deleted")
		}
		if err := e2eConverged(r); err != nil {
			t.Fatalf("the link itself must survive: %v", err)
		}
	})
}
