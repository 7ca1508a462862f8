package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
)

// TestConfigModeRejectsMutations: every topology mutation fails with ErrConfigMode and
// changes nothing.
func TestConfigModeRejectsMutations(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		for name, call := range map[string]func() (Result, error){
			"AddSegment":        func() (Result, error) { return h.svc.AddSegment(h.ctx, "s") },
			"RemoveSegment":     func() (Result, error) { return h.svc.RemoveSegment(h.ctx, "s") },
			"AddSegmentLink":    func() (Result, error) { return h.svc.AddSegmentLink(h.ctx, "s", "a", "b") },
			"RemoveSegmentLink": func() (Result, error) { return h.svc.RemoveSegmentLink(h.ctx, "s", "a", "b") },
		} {
			if _, err := call(); !errors.Is(err, ErrConfigMode) {
				t.Errorf("%s in config mode: %v, want ErrConfigMode", name, err)
			}
		}
		segs, err := h.st.ListSegments(h.ctx)
		h.must(err)
		if len(segs) != 0 {
			t.Fatalf("segments stored in config mode: %+v", segs)
		}
	})
}

// TestAPIModeTopology: segments and links added at runtime create links between the
// registered groups and route over them; removing them soft-deletes the links and
// withdraws the routes.
func TestAPIModeTopology(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), "", 1)
		h.register("cloud", "c1", true)
		h.register("a", "n1", false)
		h.register("b", "n1", false)
		equalStrings(t, "no topology, no links", h.linkStrings(), nil)

		_, err := h.svc.AddSegment(h.ctx, "tenant")
		h.must(err)
		res, err := h.svc.AddSegmentLink(h.ctx, "tenant", "a", "cloud")
		h.must(err)
		equalStrings(t, "links", h.linkStrings(), []string{"a/n1->cloud/c1"})
		equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n1"})
		_, err = h.svc.AddSegmentLink(h.ctx, "tenant", "cloud", "a")
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("duplicate segment link: %v", err)
		}
		_, err = h.svc.AddSegmentLink(h.ctx, "missing", "a", "b")
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("link in unknown segment: %v", err)
		}
		for _, bad := range [][3]string{{"tenant", "a", "a"}, {"tenant", "a", "bad name"}, {"tenant", "$group", "a"}} {
			if _, err := h.svc.AddSegmentLink(h.ctx, bad[0], bad[1], bad[2]); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("AddSegmentLink%v: %v, want ErrInvalidArgument", bad, err)
			}
		}
		if _, err := h.svc.AddSegment(h.ctx, "bad/name"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("bad segment name: %v", err)
		}

		h.claimAll()
		h.announce("a/n1", "org/ns/a")
		equalStrings(t, "routes", h.routeStrings(), []string{"cloud/c1->a org/ns/a @a/n1"})

		res, err = h.svc.RemoveSegmentLink(h.ctx, "tenant", "cloud", "a")
		h.must(err)
		equalStrings(t, "links after removal", h.linkStrings(), nil)
		equalStrings(t, "routes after removal", h.routeStrings(), nil)
		equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n1"})
		equalStrings(t, "route nodes", res.RouteNodes, []string{"cloud/c1"})

		// A "$group" segment works through the API as in the file.
		_, err = h.svc.AddSegment(h.ctx, "per-$group")
		h.must(err)
		_, err = h.svc.AddSegmentLink(h.ctx, "per-$group", "cloud", "$group")
		h.must(err)
		equalStrings(t, "template links", h.linkStrings(), []string{"a/n1->cloud/c1", "b/n1->cloud/c1"})
		_, err = h.svc.RemoveSegment(h.ctx, "per-$group")
		h.must(err)
		equalStrings(t, "links after segment removal", h.linkStrings(), nil)
	})
}

// TestRestartSemantics runs a control plane on an SQLite file, stops it, and starts
// another on the same file: API mode keeps segments and clears the rest; config mode
// rebuilds everything from the file.
func TestRestartSemantics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "cp.db")
	open := func() store.Store {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	counts := func(s store.Store) (int, int, int) {
		ns, err := s.ListNodes(ctx, store.NodeFilter{})
		must(t, err)
		ls, err := s.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
		must(t, err)
		rs, err := s.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
		must(t, err)
		return len(ns), len(ls), len(rs)
	}

	first := newHarness(t, open(), "", 1)
	_, err := first.svc.AddSegment(ctx, "tenant")
	must(t, err)
	_, err = first.svc.AddSegmentLink(ctx, "tenant", "cloud", "a")
	must(t, err)
	first.register("cloud", "c1", true)
	first.register("a", "n1", false)
	first.claimAll()
	first.announce("a/n1", "org/ns/a")
	if n, l, r := counts(first.st); n != 2 || l != 1 || r != 2 {
		t.Fatalf("before restart: %d nodes %d links %d routes", n, l, r)
	}
	must(t, first.st.Close())

	second := newHarness(t, open(), "", 1)
	if n, l, r := counts(second.st); n+l+r != 0 {
		t.Fatalf("API mode restart kept %d nodes %d links %d routes", n, l, r)
	}
	segs, err := second.st.ListSegments(ctx)
	must(t, err)
	if len(segs) != 1 || segs[0].Name != "tenant" || len(segs[0].Links) != 1 {
		t.Fatalf("API mode restart lost the topology: %+v", segs)
	}
	second.register("cloud", "c1", true)
	second.register("a", "n1", false)
	equalStrings(t, "links rebuilt", second.linkStrings(), []string{"a/n1->cloud/c1"})
	must(t, second.st.Close())

	third := newHarness(t, open(), "topology:\n  links: [{group: a, neighbors: [b]}]\n", 1)
	segs, err = third.st.ListSegments(ctx)
	must(t, err)
	if n, l, r := counts(third.st); n+l+r+len(segs) != 0 {
		t.Fatalf("config mode restart kept %d nodes %d links %d routes %d segments", n, l, r, len(segs))
	}
	third.register("cloud", "c1", true)
	third.register("a", "n1", true)
	third.register("b", "n1", false)
	equalStrings(t, "links from the file", third.linkStrings(), []string{"b/n1->a/n1"})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStaleSession: the end of a stream the node already replaced changes nothing.
func TestStaleSession(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h, l := gatewayFixture(t, open, 1, 1)
		again := h.register("a", "n1", false)
		for _, call := range []func() (Result, error){
			func() (Result, error) { return h.svc.NodeDisconnected(h.ctx, "a/n1", again.Session-1) },
			func() (Result, error) { return h.svc.NodeDeregistered(h.ctx, "a/n1", again.Session-1) },
		} {
			if _, err := call(); !errors.Is(err, ErrStaleSession) {
				t.Fatalf("old session: %v, want ErrStaleSession", err)
			}
		}
		if n, err := h.node("a/n1"); err != nil || !n.Connected {
			t.Fatalf("node after stale disconnect = %+v, %v", n, err)
		}
		if got := h.link(l.ID); got.SourceNodeID != "a/n1" {
			t.Fatalf("stale disconnect failed the link over: %+v", got)
		}
		_, err := h.svc.NodeDisconnected(h.ctx, "a/n1", again.Session)
		h.must(err)
		if _, err := h.svc.NodeDisconnected(h.ctx, "nope/x", 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown node: %v", err)
		}
	})
}

// TestConcurrentLifecycle hammers register, deregister and disconnect of the same nodes
// from many goroutines. The operations serialise: afterwards no group pair has two live
// links, every live link joins connected nodes, and the routes are steady.
func TestConcurrentLifecycle(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), "topology:\n  links: [{group: \"*\", neighbors: [\"*\"]}]\n", 1)
		h.register("cloud", "c1", true)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 4 {
			group := fmt.Sprintf("g%d", g)
			for worker := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 6 {
						reg, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: group,
							ConnDetails: details(group+"/n1", worker == 0)})
						if err != nil {
							errs <- err
							return
						}
						name := store.NewName("org", group, "svc")
						if _, err := h.svc.AddWildcardRoute(h.ctx, reg.NodeID, name); err != nil &&
							!errors.Is(err, store.ErrNotFound) {
							errs <- err
							return
						}
						leave := h.svc.NodeDisconnected
						if i%2 == 1 {
							leave = h.svc.NodeDeregistered
						}
						if _, err := leave(h.ctx, reg.NodeID, reg.Session); err != nil &&
							!errors.Is(err, ErrStaleSession) && !errors.Is(err, store.ErrNotFound) {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		pairs := map[[2]string]bool{}
		for _, l := range h.links(store.LinkFilter{}) {
			p := pair(l.SourceGroup, l.DestGroup)
			if pairs[p] {
				t.Fatalf("two live links for %v", p)
			}
			pairs[p] = true
			for _, id := range []string{l.SourceNodeID, l.TargetNodeID} {
				if n, err := h.node(id); err != nil || !n.Connected {
					t.Fatalf("live link %s uses %s: %+v %v", l.ID, id, n, err)
				}
			}
		}
		h.steady()
	})
}

// TestAPIModeDefaultSegment: a segment link without a segment goes to
// DefaultSegment, made on first use; removing it without a segment removes it there.
func TestAPIModeDefaultSegment(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), "", 1)
		h.register("cloud", "c1", true)
		h.register("a", "n1", false)
		h.register("b", "n1", false)
		_, err := h.svc.AddSegmentLink(h.ctx, "", "a", "cloud")
		h.must(err)
		_, err = h.svc.AddSegmentLink(h.ctx, "", "b", "cloud")
		h.must(err)
		segs, err := h.st.ListSegments(h.ctx)
		h.must(err)
		if len(segs) != 1 || segs[0].Name != DefaultSegment || len(segs[0].Links) != 2 {
			t.Fatalf("segments after two links without a segment: %+v, want %q with 2 links", segs, DefaultSegment)
		}
		equalStrings(t, "links", h.linkStrings(), []string{"a/n1->cloud/c1", "b/n1->cloud/c1"})
		_, err = h.svc.RemoveSegmentLink(h.ctx, "", "cloud", "a")
		h.must(err)
		equalStrings(t, "links after removal", h.linkStrings(), []string{"b/n1->cloud/c1"})
		// A link that is not there is named, whether its segment exists or not.
		for _, seg := range []string{"", "nosuch"} {
			_, err = h.svc.RemoveSegmentLink(h.ctx, seg, "cloud", "nosuch")
			if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "link cloud <-> nosuch in segment") {
				t.Errorf("removing a link that is not there (segment %q) = %v, want not found naming the link", seg, err)
			}
		}
	})
}
