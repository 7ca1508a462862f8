package node

import (
	"slices"
	"sync"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

// table is the forwarding table: for each name, the local subscribers, the links a
// control-plane route sends it over, and the peers in the group that take it (those
// with a local subscriber apart from those that only route it on). Writes are rare
// (subscriptions, routes, offers) and rebuild small slices; reads take a read lock.
type table struct {
	mu          sync.RWMutex
	local       map[dataplane.Name][]*localSub
	routes      map[dataplane.Name][]*conn
	peersLocal  map[dataplane.Name][]*conn
	peersRouted map[dataplane.Name][]*conn
}

func newTable() *table {
	return &table{
		local:       map[dataplane.Name][]*localSub{},
		routes:      map[dataplane.Name][]*conn{},
		peersLocal:  map[dataplane.Name][]*conn{},
		peersRouted: map[dataplane.Name][]*conn{},
	}
}

func addTo[T comparable](m map[dataplane.Name][]T, name dataplane.Name, v T) {
	if !slices.Contains(m[name], v) {
		m[name] = append(slices.Clone(m[name]), v)
	}
}

func removeFrom[T comparable](m map[dataplane.Name][]T, name dataplane.Name, v T) {
	i := slices.Index(m[name], v)
	if i < 0 {
		return
	}
	if len(m[name]) == 1 {
		delete(m, name)
		return
	}
	m[name] = slices.Delete(slices.Clone(m[name]), i, i+1)
}

func (t *table) addLocal(name dataplane.Name, s *localSub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	addTo(t.local, name, s)
}

// removeLocal reports whether name has no local subscriber left.
func (t *table) removeLocal(name dataplane.Name, s *localSub) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	removeFrom(t.local, name, s)
	return len(t.local[name]) == 0
}

func (t *table) addRoute(name dataplane.Name, c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	addTo(t.routes, name, c)
}

func (t *table) removeRoute(name dataplane.Name, c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	removeFrom(t.routes, name, c)
}

// setPeer records that peer conn c takes name, with or without a local subscriber.
func (t *table) setPeer(name dataplane.Name, c *conn, local bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if local {
		removeFrom(t.peersRouted, name, c)
		addTo(t.peersLocal, name, c)
	} else {
		removeFrom(t.peersLocal, name, c)
		addTo(t.peersRouted, name, c)
	}
}

func (t *table) dropPeer(name dataplane.Name, c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	removeFrom(t.peersLocal, name, c)
	removeFrom(t.peersRouted, name, c)
}

// forgetConn removes c everywhere (it closed).
func (t *table) forgetConn(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []map[dataplane.Name][]*conn{t.routes, t.peersLocal, t.peersRouted} {
		for name := range m {
			removeFrom(m, name, c)
		}
	}
}

// targets is where one message may go, by preference.
type targets struct {
	local       []*localSub
	peersLocal  []*conn
	routes      []*conn
	peersRouted []*conn
}

// lookup returns name's targets for a message that came from conn from (nil: published
// here). A message never goes back where it came from, and one from a peer never goes
// to another peer: the group is a full mesh, so one hop inside it is enough, and two
// could loop.
func (t *table) lookup(name dataplane.Name, from *conn) targets {
	t.mu.RLock()
	defer t.mu.RUnlock()
	tg := targets{local: t.local[name], routes: t.routes[name]}
	if from == nil || !from.kind.isPeer() {
		tg.peersLocal, tg.peersRouted = t.peersLocal[name], t.peersRouted[name]
	}
	return tg
}
