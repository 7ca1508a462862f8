package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

var errInjected = errors.New("injected store failure")

// failingStore fails the failAt-th write made through it (counting from 1 after arm)
// and passes everything else on; reads always pass.
type failingStore struct {
	store.Store
	mu     sync.Mutex
	writes int
	failAt int // 0: never
}

func (s *failingStore) arm(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes, s.failAt = 0, n
}

// count reports the writes made since arm.
func (s *failingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func (s *failingStore) write(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.writes == s.failAt {
		return fmt.Errorf("%w: write %d (%s)", errInjected, s.writes, what)
	}
	return nil
}

func (s *failingStore) SaveNode(ctx context.Context, n store.Node) error {
	if err := s.write("save node"); err != nil {
		return err
	}
	return s.Store.SaveNode(ctx, n)
}

func (s *failingStore) SetNodeConnected(ctx context.Context, id string, c bool) error {
	if err := s.write("set node connected"); err != nil {
		return err
	}
	return s.Store.SetNodeConnected(ctx, id, c)
}

func (s *failingStore) DeleteNode(ctx context.Context, id string) error {
	if err := s.write("delete node"); err != nil {
		return err
	}
	return s.Store.DeleteNode(ctx, id)
}

func (s *failingStore) CreateLink(ctx context.Context, l store.Link) error {
	if err := s.write("create link"); err != nil {
		return err
	}
	return s.Store.CreateLink(ctx, l)
}

func (s *failingStore) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	if err := s.write("update link"); err != nil {
		return store.Link{}, err
	}
	return s.Store.UpdateLink(ctx, id, u)
}

func (s *failingStore) DeleteLink(ctx context.Context, id string) error {
	if err := s.write("delete link"); err != nil {
		return err
	}
	return s.Store.DeleteLink(ctx, id)
}

func (s *failingStore) DeleteLinkIf(ctx context.Context, id string, v int64) error {
	if err := s.write("delete link if"); err != nil {
		return err
	}
	return s.Store.DeleteLinkIf(ctx, id, v)
}

func (s *failingStore) CreateRoute(ctx context.Context, r store.Route) (store.Route, error) {
	if err := s.write("create route"); err != nil {
		return store.Route{}, err
	}
	return s.Store.CreateRoute(ctx, r)
}

func (s *failingStore) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (store.Route, error) {
	if err := s.write("update route"); err != nil {
		return store.Route{}, err
	}
	return s.Store.UpdateRoute(ctx, id, u)
}

func (s *failingStore) DeleteRoute(ctx context.Context, id int64) error {
	if err := s.write("delete route"); err != nil {
		return err
	}
	return s.Store.DeleteRoute(ctx, id)
}

func (s *failingStore) DeleteRouteIf(ctx context.Context, id int64, v int64) error {
	if err := s.write("delete route if"); err != nil {
		return err
	}
	return s.Store.DeleteRouteIf(ctx, id, v)
}

func (s *failingStore) CreateSegment(ctx context.Context, name string) error {
	if err := s.write("create segment"); err != nil {
		return err
	}
	return s.Store.CreateSegment(ctx, name)
}

func (s *failingStore) DeleteSegment(ctx context.Context, name string) error {
	if err := s.write("delete segment"); err != nil {
		return err
	}
	return s.Store.DeleteSegment(ctx, name)
}

func (s *failingStore) AddSegmentLink(ctx context.Context, l store.SegmentLink) error {
	if err := s.write("add segment link"); err != nil {
		return err
	}
	return s.Store.AddSegmentLink(ctx, l)
}

func (s *failingStore) RemoveSegmentLink(ctx context.Context, l store.SegmentLink) error {
	if err := s.write("remove segment link"); err != nil {
		return err
	}
	return s.Store.RemoveSegmentLink(ctx, l)
}

// dump renders every record, deleted ones included, without update times.
func dump(t testing.TB, ctx context.Context, st store.Store) string {
	t.Helper()
	nodes, err := st.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	links, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		t.Fatal(err)
	}
	segs, err := st.ListSegments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		nodes[i].LastUpdated = time.Time{}
	}
	for i := range links {
		links[i].LastUpdated = time.Time{}
	}
	for i := range routes {
		routes[i].LastUpdated = time.Time{}
	}
	return fmt.Sprintf("nodes %+v\nlinks %+v\nroutes %+v\nsegments %+v", nodes, links, routes, segs)
}

// TestLifecycleChangesAreAtomic: a store failure at any write of a multi-write
// lifecycle change (departures with failover and route cleanup, the last node of a
// group leaving, a registration that creates links and expands routes, a claim, an
// announcement, a topology change) leaves the store exactly as it was, and the same
// change succeeds when retried.
func TestLifecycleChangesAreAtomic(t *testing.T) {
	type op struct {
		name  string
		setup func(h *harness)
		run   func(h *harness) error
		api   bool // API mode (segments in the store) rather than the star from the file
	}
	segments := func(h *harness) {
		_, err := h.svc.AddSegment(h.ctx, "tenants")
		h.must(err)
		h.register("cloud", "c1", true)
		h.register("a", "n1", false)
		h.register("b", "n1", true)
		_, err = h.svc.AddSegmentLink(h.ctx, "tenants", "cloud", "a")
		h.must(err)
		h.claimAll()
		h.announce("cloud/c1", "org/ns/cloud")
		h.announce("b/n1", "org/ns/b")
	}
	gateway := func(siblings int) func(h *harness) {
		return func(h *harness) {
			h.register("cloud", "c1", true)
			h.register("a", "n1", false)
			for i := range siblings {
				h.register("a", fmt.Sprintf("n%d", i+2), false)
			}
			h.register("b", "n1", true)
			h.claimAll()
			h.announce("cloud/c1", "org/ns/cloud")
			h.announce("b/n1", "org/ns/b")
		}
	}
	ops := []op{
		{"deregister gateway with sibling", gateway(1), func(h *harness) error {
			_, err := h.svc.NodeDeregistered(h.ctx, "a/n1", 0)
			return err
		}, false},
		{"crash of gateway with sibling", gateway(1), func(h *harness) error {
			_, err := h.svc.NodeDisconnected(h.ctx, "a/n1", 0)
			return err
		}, false},
		{"destination gateway leaves", gateway(1), func(h *harness) error {
			_, err := h.svc.NodeDeregistered(h.ctx, "cloud/c1", 0)
			return err
		}, false},
		{"last node of group leaves", gateway(0), func(h *harness) error {
			_, err := h.svc.NodeDeregistered(h.ctx, "a/n1", 0)
			return err
		}, false},
		{"registration", gateway(0), func(h *harness) error {
			_, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: "c",
				ConnDetails: details("c/n1", true)})
			return err
		}, false},
		{"re-registration with reports", gateway(1), func(h *harness) error {
			l := h.linkFrom("a/n1")
			_, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: "a",
				ConnDetails: details("a/n1", false), Connections: []ConnectionReport{{LinkID: l.ID, Alive: false}}})
			return err
		}, false},
		{"announcement", gateway(1), func(h *harness) error {
			_, err := h.svc.AddWildcardRoute(h.ctx, "a/n2", store.NewName("org", "ns", "a"))
			return err
		}, false},
		{"withdrawal", gateway(1), func(h *harness) error {
			_, err := h.svc.DeleteWildcardRoute(h.ctx, "cloud/c1", store.NewName("org", "ns", "cloud"))
			return err
		}, false},
		{"segment link added", segments, func(h *harness) error {
			_, err := h.svc.AddSegmentLink(h.ctx, "tenants", "cloud", "b")
			return err
		}, true},
		{"segment removed", segments, func(h *harness) error {
			_, err := h.svc.RemoveSegment(h.ctx, "tenants")
			return err
		}, true},
	}
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, o := range ops {
			t.Run(o.name, func(t *testing.T) {
				for failAt := 1; ; failAt++ {
					fs := &failingStore{Store: open(t)}
					topo := starTopology
					if o.api {
						topo = ""
					}
					h := newHarness(t, fs, topo, 1)
					o.setup(h)
					before := dump(t, h.ctx, fs)
					fs.arm(failAt)
					err := o.run(h)
					if err == nil {
						if fs.count() >= failAt {
							t.Fatalf("write %d failed but the operation reported success", failAt)
						}
						if failAt < 3 {
							t.Fatalf("only %d writes: not a multi-write change", fs.count())
						}
						return // every write position has been failed once
					}
					if !errors.Is(err, errInjected) {
						t.Fatalf("failing write %d: %v", failAt, err)
					}
					if after := dump(t, h.ctx, fs); after != before {
						t.Fatalf("write %d failed (%v) and left the change half-applied:\nbefore:\n%s\nafter:\n%s",
							failAt, err, before, after)
					}
					fs.arm(0)
					if err := o.run(h); err != nil {
						t.Fatalf("retry after failing write %d: %v", failAt, err)
					}
				}
			})
		}
	})
}
