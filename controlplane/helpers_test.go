package controlplane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
)

// stores lists the implementations every lifecycle test runs against.
var stores = []struct {
	name string
	open func(t testing.TB) store.Store
}{
	{"memory", func(testing.TB) store.Store { return memory.New() }},
	{"sqlite", func(t testing.TB) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cp.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// bothStores runs fn once per store implementation.
func bothStores(t *testing.T, fn func(t *testing.T, open func(testing.TB) store.Store)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { fn(t, s.open) })
	}
}

type harness struct {
	t   testing.TB
	ctx context.Context
	svc *Service
	st  store.Store
}

func topology(t testing.TB, yml string) *config.Topology {
	t.Helper()
	if yml == "" {
		return nil
	}
	c, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	return c.Topology
}

// newHarness starts a service on st with the topology YAML ("" = API mode), a seeded
// random source and readable link ids.
func newHarness(t testing.TB, st store.Store, topoYAML string, seed uint64) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	t.Cleanup(func() { _ = st.Close() })
	n := 0
	svc, err := New(ctx, Options{
		Store: st, Topology: topology(t, topoYAML), Rand: rand.New(rand.NewPCG(seed, seed+1)),
		NewLinkID: func() string { n++; return fmt.Sprintf("link-%03d", n) },
		Links:     LinkSettings{SpireSocketPath: "/run/spire.sock", BackoffInitial: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, ctx: ctx, svc: svc, st: st}
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// details returns connection details with an external endpoint when ext is set.
func details(id string, ext bool) []store.ConnectionDetails {
	cd := store.ConnectionDetails{Endpoint: id + ".internal:46357"}
	if ext {
		cd.ExternalEndpoint, cd.MTLSRequired = id+".example:443", true
	}
	return []store.ConnectionDetails{cd}
}

// register registers group/id; ext gives it an external endpoint.
func (h *harness) register(group, id string, ext bool, reports ...ConnectionReport) Registered {
	h.t.Helper()
	r, err := h.svc.NodeRegistered(h.ctx, Registration{
		NodeID: id, Group: group, ConnDetails: details(NodeID(group, id), ext), Connections: reports,
	})
	h.must(err)
	return r
}

// claimAll claims every unclaimed live link by its target, as the destination node
// would on receiving the connection.
func (h *harness) claimAll() {
	h.t.Helper()
	for _, l := range h.links(store.LinkFilter{}) {
		if l.DestNodeID == "" {
			_, err := h.svc.ClaimLink(h.ctx, l.TargetNodeID, l.ID)
			h.must(err)
		}
	}
}

func (h *harness) announce(nodeID, name string) Result {
	h.t.Helper()
	n, err := store.ParseName(name)
	h.must(err)
	r, err := h.svc.AddWildcardRoute(h.ctx, nodeID, n)
	h.must(err)
	return r
}

func (h *harness) links(f store.LinkFilter) []store.Link {
	h.t.Helper()
	ls, err := h.st.ListLinks(h.ctx, f)
	h.must(err)
	return ls
}

func (h *harness) link(id string) store.Link {
	h.t.Helper()
	l, err := h.st.GetLink(h.ctx, id)
	h.must(err)
	return l
}

func (h *harness) routes(f store.RouteFilter) []store.Route {
	h.t.Helper()
	rs, err := h.st.ListRoutes(h.ctx, f)
	h.must(err)
	return rs
}

// linkStrings renders live links as "source->target", sorted.
func (h *harness) linkStrings() []string {
	var out []string
	for _, l := range h.links(store.LinkFilter{}) {
		out = append(out, l.SourceNodeID+"->"+l.TargetNodeID)
	}
	slices.Sort(out)
	return out
}

// routeStrings renders live expansions as "gateway->peer-group name @announcer", sorted.
func (h *harness) routeStrings() []string {
	h.t.Helper()
	var out []string
	for _, r := range h.routes(store.RouteFilter{}) {
		if r.IsTemplate() {
			continue
		}
		l := h.link(r.LinkID)
		out = append(out, fmt.Sprintf("%s->%s %s @%s", r.SourceNodeID, l.Peer(GroupOf(r.SourceNodeID)), r.Name, r.DestNodeID))
	}
	slices.Sort(out)
	return out
}

func equalStrings(t testing.TB, what string, got, want []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// steady re-runs the expansion and fails if it would change anything: the stored routes
// are exactly what the topology and announcements want.
func (h *harness) steady() {
	h.t.Helper()
	h.svc.mu.Lock()
	defer h.svc.mu.Unlock()
	w := newWork()
	h.must(h.svc.expandAll(h.ctx, w))
	if r := w.result(); len(r.RouteNodes) != 0 {
		h.t.Fatalf("expansion not steady: would touch routes of %v", r.RouteNodes)
	}
}
