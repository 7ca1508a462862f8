package controlplane

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// TestIncrementalMatchesFull runs random sequences of registrations, claims,
// announcements, withdrawals, crashes and departures, and after every step re-plans
// everything from the store alone: the routes planned step by step — each step
// re-planning only the names and links it touched, from the service's own copy of the
// links, announcements and groups — must be exactly those, destinations included.
func TestIncrementalMatchesFull(t *testing.T) {
	const mesh = "topology:\n  links:\n    - group: '*'\n      neighbors: ['*']\n"
	for _, topo := range []struct{ name, yaml string }{{"star", starTopology}, {"mesh", mesh}} {
		t.Run(topo.name, func(t *testing.T) {
			bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
				for seed := range uint64(3) {
					t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
						h := newHarness(t, open(t), topo.yaml, seed)
						r := rand.New(rand.NewPCG(seed, 99))
						groups := []string{"cloud", "a", "b", "c", "d"}
						names := []string{"o/n/x", "o/n/y", "o/n/z"}
						for step := range 120 {
							op := h.randomStep(r, groups, names)
							before := h.routeStrings()
							h.steady()
							equalStrings(t, fmt.Sprintf("step %d (%s): routes after a full re-plan", step, op), h.routeStrings(), before)
						}
					})
				}
			})
		})
	}
}

// randomStep makes one random change and names it.
func (h *harness) randomStep(r *rand.Rand, groups, names []string) string {
	h.t.Helper()
	connected, err := h.st.ListNodes(h.ctx, store.NodeFilter{ConnectedOnly: true})
	h.must(err)
	pickNode := func() (store.Node, bool) {
		if len(connected) == 0 {
			return store.Node{}, false
		}
		return connected[r.IntN(len(connected))], true
	}
	switch k := r.IntN(10); {
	case k < 3:
		g, id := groups[r.IntN(len(groups))], fmt.Sprintf("n%d", r.IntN(3))
		h.register(g, id, r.IntN(5) > 0)
		return "register " + g + "/" + id
	case k < 5:
		h.claimAll()
		return "claim all"
	case k < 7:
		n, ok := pickNode()
		if !ok {
			return "nothing"
		}
		name := names[r.IntN(len(names))]
		h.announce(n.ID, name)
		return "announce " + name + " by " + n.ID
	case k == 7:
		tpls := h.routes(store.RouteFilter{SourceNodeID: store.AllNodes})
		if len(tpls) == 0 {
			return "nothing"
		}
		tp := tpls[r.IntN(len(tpls))]
		_, err := h.svc.DeleteWildcardRoute(h.ctx, tp.DestNodeID, tp.Name)
		h.must(err)
		return "withdraw " + tp.Name.String() + " by " + tp.DestNodeID
	case k == 8:
		n, ok := pickNode()
		if !ok {
			return "nothing"
		}
		_, err := h.svc.NodeDisconnected(h.ctx, n.ID, 0)
		h.must(err)
		return "crash " + n.ID
	default:
		n, ok := pickNode()
		if !ok {
			return "nothing"
		}
		_, err := h.svc.NodeDeregistered(h.ctx, n.ID, 0)
		h.must(err)
		return "deregister " + n.ID
	}
}
