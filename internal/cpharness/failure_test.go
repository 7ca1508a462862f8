package cpharness

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
)

const starTopology = "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n"

// recordingStore notes every link marked deleted and every link hard-deleted.
type recordingStore struct {
	store.Store
	mu          sync.Mutex
	softDeleted map[string]bool
	hardDeleted map[string]bool
}

func (s *recordingStore) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	l, err := s.Store.UpdateLink(ctx, id, u)
	if err == nil && l.Deleted {
		s.mu.Lock()
		s.softDeleted[id] = true
		s.mu.Unlock()
	}
	return l, err
}

func (s *recordingStore) DeleteLink(ctx context.Context, id string) error {
	return s.hardDelete(id, s.Store.DeleteLink(ctx, id))
}

// DeleteLinkIf is the reconciler's hard delete.
func (s *recordingStore) DeleteLinkIf(ctx context.Context, id string, version int64) error {
	return s.hardDelete(id, s.Store.DeleteLinkIf(ctx, id, version))
}

func (s *recordingStore) hardDelete(id string, err error) error {
	if err == nil {
		s.mu.Lock()
		s.hardDeleted[id] = true
		s.mu.Unlock()
	}
	return err
}

func (s *recordingStore) deleted(id string) (soft, hard bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.softDeleted[id], s.hardDeleted[id]
}

func openStore(t *testing.T, db string) store.Store {
	t.Helper()
	if db == config.DatabaseInMemory {
		return memory.New()
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func withStore(st store.Store) func(*server.Options) { return func(o *server.Options) { o.Store = st } }

func linkTo(t *testing.T, st store.Store, group string) store.Link {
	t.Helper()
	links, err := st.ListLinks(context.Background(), store.LinkFilter{Group: group})
	if err != nil || len(links) != 1 {
		t.Fatalf("links of %s: %v, %v", group, links, err)
	}
	return links[0]
}

// TestGatewayCrashFailover: the node at either end of an inter-group link crashes;
// the link fails over to a sibling (same id when the crashed node dialled it, a new
// link to the group when it was the destination), routes follow, and everything
// converges again; the crashed node's record is kept, and when it comes back it joins
// the converged state.
func TestGatewayCrashFailover(t *testing.T) {
	for _, end := range []string{"source", "destination"} {
		t.Run(end, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				c := startCP(t, testConfig(t, db, starTopology))
				f := newFabric(t)
				startNodes(t, f, c, 3, "cloud", "edge-a", "edge-b")
				announce(t, f, c, "edge-a/n1", "edge-b/n1")
				converge(t, c, f, true)
				before := linkTo(t, c.Store(), "edge-a")
				gw := before.SourceNodeID
				if end == "destination" {
					gw = before.DestNodeID
				}
				f.Node(gw).Crash()
				converge(t, c, f, true)
				checkGone(t, c.Store(), gw)
				after := linkTo(t, c.Store(), "edge-a")
				switch {
				case end == "source" && (after.ID != before.ID || after.SourceGroup != before.SourceGroup):
					t.Fatalf("outgoing failover must keep link %s in group %s, got %+v", before.ID, before.SourceGroup, after)
				case end == "destination" && (after.ID == before.ID || after.Peer(before.SourceGroup) != before.DestGroup):
					t.Fatalf("incoming failover must replace link %s with a new one to %s, got %+v", before.ID, before.DestGroup, after)
				}
				if got := linkPairs(t, c.Store()); !slices.Equal(got, []string{"cloud-edge-a", "cloud-edge-b"}) {
					t.Fatalf("links %v", got)
				}
				n, err := c.Store().GetNode(context.Background(), gw)
				if err != nil || n.Connected {
					t.Fatalf("crashed node record: %+v, %v (want kept, disconnected)", n, err)
				}
				if err := f.Node(gw).Restart(); err != nil {
					t.Fatal(err)
				}
				converge(t, c, f, true)
			})
		})
	}
}

// checkGone: no live link or route involves node.
func checkGone(t *testing.T, st store.Store, node string) {
	t.Helper()
	links, _ := st.ListLinks(context.Background(), store.LinkFilter{})
	for _, l := range links {
		if l.SourceNodeID == node || l.DestNodeID == node {
			t.Fatalf("link %s still involves %s: %+v", l.ID, node, l)
		}
	}
	for _, r := range routesOf(t, st) {
		if r.SourceNodeID == node || r.DestNodeID == node {
			t.Fatalf("route %d still involves %s: %+v", r.ID, node, r)
		}
	}
}

func announce(t *testing.T, f *Fabric, c *cp, nodes ...string) {
	t.Helper()
	if err := f.WaitRegistered(timeout(t, 20e9)); err != nil {
		t.Fatal(err)
	}
	for _, id := range nodes {
		if err := f.Node(id).Announce(svcName); err != nil {
			t.Fatal(err)
		}
		waitTemplate(t, c, id)
	}
}

// TestLastNodeOfGroupLeaves: when the only node of a group deregisters (or crashes),
// the group's links are soft-deleted, then deleted on the data plane and hard-deleted
// by the link reconciler; routes toward the group go. A node joining the group later
// gets new links.
func TestLastNodeOfGroupLeaves(t *testing.T) {
	for _, how := range []string{"deregister", "crash"} {
		t.Run(how, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				rec := &recordingStore{Store: openStore(t, db), softDeleted: map[string]bool{}, hardDeleted: map[string]bool{}}
				c := startCP(t, testConfig(t, db, starTopology), withStore(rec))
				f := newFabric(t)
				startNodes(t, f, c, 2, "cloud", "edge-b")
				startNodes(t, f, c, 1, "edge-a")
				announce(t, f, c, "edge-a/n1", "edge-b/n1")
				converge(t, c, f, true)
				gone := linkTo(t, c.Store(), "edge-a")
				leaver := f.Node("edge-a/n1")
				if how == "deregister" {
					if err := leaver.Deregister(timeout(t, 10e9)); err != nil {
						t.Fatalf("deregister: %v (the response must come before the stream is removed)", err)
					}
				} else {
					leaver.Crash()
				}
				converge(t, c, f, true)
				// A link the crashed node dialled waits for it to come back to be deleted.
				waits := how == "crash" && gone.SourceNodeID == leaver.ID()
				if soft, hard := rec.deleted(gone.ID); !soft || hard == waits {
					t.Fatalf("link %s: soft-deleted %v, hard-deleted %v; want true, %v", gone.ID, soft, hard, !waits)
				}
				if got := linkPairs(t, c.Store()); !slices.Equal(got, []string{"cloud-edge-b"}) {
					t.Fatalf("links %v", got)
				}
				checkGone(t, c.Store(), leaver.ID())
				_, err := c.Store().GetNode(context.Background(), leaver.ID())
				if kept := err == nil; kept != (how == "crash") {
					t.Fatalf("node record after %s: %v", how, err)
				}
				if err := leaver.Restart(); err != nil {
					t.Fatal(err)
				}
				converge(t, c, f, true)
				if _, hard := rec.deleted(gone.ID); !hard {
					t.Fatalf("link %s not hard-deleted after its source came back", gone.ID)
				}
				if back := linkTo(t, c.Store(), "edge-a"); back.ID == gone.ID {
					t.Fatalf("link %s reused after the group emptied", gone.ID)
				}
			})
		})
	}
}

// connects counts the datapath's "connect" operations per link.
func connects(f *Fabric) map[string]int {
	out := map[string]int{}
	for _, n := range f.Nodes() {
		if !n.Up() {
			continue
		}
		for _, op := range n.Datapath().Ops() {
			if fields := strings.Fields(op); len(fields) == 3 && fields[0] == "connect" {
				out[fields[1]]++
			}
		}
	}
	return out
}

// TestReconnectKeepsLiveConnections: nodes replace their CP stream while their
// datapaths keep the connections; the registration reports them, so nothing is
// dialled again. A connection that was lost meanwhile is re-created.
func TestReconnectKeepsLiveConnections(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		c := startCP(t, testConfig(t, db, starTopology))
		f := newFabric(t)
		startNodes(t, f, c, 2, "cloud", "edge-a", "edge-b")
		announce(t, f, c, "edge-a/n1", "edge-b/n2")
		converge(t, c, f, true)
		before := connects(f)
		links, _ := c.Store().ListLinks(context.Background(), store.LinkFilter{})
		for _, n := range f.Nodes() {
			if err := n.Reopen(timeout(t, 20e9)); err != nil {
				t.Fatal(err)
			}
		}
		converge(t, c, f, true)
		time.Sleep(300 * time.Millisecond) // room for a needless re-dial to show
		converge(t, c, f, true)
		if after := connects(f); !mapsEqual(before, after) {
			t.Fatalf("connects before %v, after reconnect %v: nothing should be dialled again", before, after)
		}
		again, _ := c.Store().ListLinks(context.Background(), store.LinkFilter{})
		if !slices.EqualFunc(links, again, func(a, b store.Link) bool { return a.ID == b.ID && a.SourceNodeID == b.SourceNodeID }) {
			t.Fatalf("links changed across reconnect: %v -> %v", links, again)
		}

		lost := links[0]
		if !f.Node(lost.SourceNodeID).DropLink(lost.ID) {
			t.Fatalf("link %s not on %s", lost.ID, lost.SourceNodeID)
		}
		if err := f.Node(lost.SourceNodeID).Reopen(timeout(t, 20e9)); err != nil {
			t.Fatal(err)
		}
		converge(t, c, f, true)
		if n := connects(f)[lost.ID]; n != before[lost.ID]+1 {
			t.Fatalf("lost link %s dialled %d times, want %d", lost.ID, n, before[lost.ID]+1)
		}
	})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPeriodicSweepRepairsDrift: a connection vanishes without the CP being told; the
// periodic sweep finds it and the reconcilers restore link and routes.
func TestPeriodicSweepRepairsDrift(t *testing.T) {
	cfg := testConfig(t, config.DatabaseInMemory, starTopology)
	cfg.Reconciler.ReconcilePeriod = 100e6
	c := startCP(t, cfg)
	f := newFabric(t)
	startNodes(t, f, c, 1, "cloud", "edge-a")
	announce(t, f, c, "edge-a/n1")
	converge(t, c, f, true)
	l := linkTo(t, c.Store(), "edge-a")
	before := connects(f)[l.ID]
	f.Node(l.SourceNodeID).DropLink(l.ID)
	converge(t, c, f, true)
	if n := connects(f)[l.ID]; n != before+1 {
		t.Fatalf("link %s dialled %d times, want %d", l.ID, n, before+1)
	}
}
