package memory

import (
	"context"
	"slices"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

func cloneNode(n store.Node) store.Node {
	if len(n.ConnDetails) == 0 {
		n.ConnDetails = nil
	} else {
		n.ConnDetails = slices.Clone(n.ConnDetails)
	}
	return n
}

// The put and remove helpers change a table and record in t how to undo it. The undo
// steps hold the old record or an id, not the new record; a route's step is a value
// in the transaction's log (no closure), since a planning step writes a thousand
// routes and a reconciler pass hundreds of statuses. Outside a transaction nothing
// is recorded.

// putNode stores n, recording its undo in t.
func (s *Store) putNode(t *tx, n store.Node) {
	tbl := s.nodes
	old, had := tbl.byID[n.ID]
	tbl.put(n)
	switch {
	case t == nil:
	case had:
		t.record(func() { tbl.put(old) })
	default:
		id := n.ID
		t.record(func() { tbl.remove(id) })
	}
}

func (s *Store) removeNode(t *tx, id string) {
	tbl := s.nodes
	old, had := tbl.byID[id]
	tbl.remove(id)
	if had && t != nil {
		t.record(func() { tbl.put(old) })
	}
}

func (s *Store) putLink(t *tx, l store.Link) {
	tbl := s.links
	old, had := tbl.byID[l.ID]
	tbl.put(l)
	switch {
	case t == nil:
	case had:
		t.record(func() { tbl.put(old) })
	default:
		id := l.ID
		t.record(func() { tbl.remove(id) })
	}
}

func (s *Store) removeLink(t *tx, id string) {
	tbl := s.links
	old, had := tbl.byID[id]
	tbl.remove(id)
	if had && t != nil {
		t.record(func() { tbl.put(old) })
	}
}

func (s *Store) putRoute(t *tx, r store.Route) {
	tbl := s.routes
	old, had := tbl.put(r, t != nil)
	switch {
	case t == nil:
	case had:
		t.recordRoute(routePut, tbl, old)
	default:
		t.recordRoute(routeRemove, tbl, store.Route{ID: r.ID})
	}
}

func (s *Store) removeRoute(t *tx, id int64) {
	tbl := s.routes
	old, had := tbl.remove(id, t != nil)
	if had {
		t.recordRoute(routePut, tbl, old)
	}
}

// routeTime is now for a route: without the monotonic clock reading, which the route
// table does not keep, so that a route returned by a write equals the route read back.
func (s *Store) routeTime() time.Time { return s.now().Round(0) }

// SaveNode implements store.Store.
func (s *Store) SaveNode(ctx context.Context, n store.Node) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	n = cloneNode(n)
	n.LastUpdated = s.now()
	s.putNode(t, n)
	return nil
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Node{}, err
	}
	defer unlock()
	n, ok := s.nodes.byID[id]
	if !ok {
		return store.Node{}, store.NotFound("node", id)
	}
	return cloneNode(n), nil
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	keep := func(n store.Node) bool { return !f.ConnectedOnly || n.Connected }
	var out []store.Node
	if f.Group != "" {
		ids := s.nodes.byGroup[f.Group] // sorted
		out = make([]store.Node, 0, len(ids))
		for _, id := range ids {
			if n := s.nodes.byID[id]; keep(n) {
				out = append(out, n)
			}
		}
	} else {
		out = sortedValues(s.nodes.byID, keep, func(n store.Node) string { return n.ID })
	}
	for i := range out {
		out[i] = cloneNode(out[i])
	}
	return out, nil
}

// ListGroups implements store.Store.
func (s *Store) ListGroups(ctx context.Context) ([]string, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]string, 0, len(s.nodes.byGroup))
	for g := range s.nodes.byGroup {
		if g != "" {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, nil
}

// SetNodeConnected implements store.Store.
func (s *Store) SetNodeConnected(ctx context.Context, id string, connected bool) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	n, ok := s.nodes.byID[id]
	if !ok {
		return store.NotFound("node", id)
	}
	n.Connected, n.LastUpdated = connected, s.now()
	s.putNode(t, n)
	return nil
}

// DeleteNode implements store.Store.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.nodes.byID[id]; !ok {
		return store.NotFound("node", id)
	}
	s.removeNode(t, id)
	return nil
}

// CreateLink implements store.Store.
func (s *Store) CreateLink(ctx context.Context, l store.Link) error {
	if err := store.CheckNewLink(l); err != nil {
		return err
	}
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.links.byID[l.ID]; ok {
		return store.Exists("link", l.ID)
	}
	l.LastUpdated, l.Version = s.now(), 1
	s.putLink(t, l)
	return nil
}

// GetLink implements store.Store.
func (s *Store) GetLink(ctx context.Context, id string) (store.Link, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Link{}, err
	}
	defer unlock()
	l, ok := s.links.byID[id]
	if !ok {
		return store.Link{}, store.NotFound("link", id)
	}
	return l, nil
}

// ListLinks implements store.Store.
func (s *Store) ListLinks(ctx context.Context, f store.LinkFilter) ([]store.Link, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.links.list(f), nil
}

// UpdateLink implements store.Store.
func (s *Store) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return store.Link{}, err
	}
	defer unlock()
	l, ok := s.links.byID[id]
	if !ok {
		return store.Link{}, store.NotFound("link", id)
	}
	l, err = u.Apply(l)
	if err != nil {
		return store.Link{}, err
	}
	l.LastUpdated = s.now()
	s.putLink(t, l)
	return l, nil
}

// DeleteLink implements store.Store.
func (s *Store) DeleteLink(ctx context.Context, id string) error {
	return s.deleteLink(ctx, id, nil)
}

// DeleteLinkIf implements store.Store.
func (s *Store) DeleteLinkIf(ctx context.Context, id string, version int64) error {
	return s.deleteLink(ctx, id, &version)
}

func (s *Store) deleteLink(ctx context.Context, id string, version *int64) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	l, ok := s.links.byID[id]
	if !ok {
		return store.NotFound("link", id)
	}
	if err := store.CheckVersion("link "+id, l.Version, version); err != nil {
		return err
	}
	s.removeLink(t, id)
	return nil
}

// CreateRoute implements store.Store.
func (s *Store) CreateRoute(ctx context.Context, r store.Route) (store.Route, error) {
	if err := store.CheckNewRoute(r); err != nil {
		return store.Route{}, err
	}
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return store.Route{}, err
	}
	defer unlock()
	tbl := s.routes
	r.ID, r.LastUpdated, r.Version = tbl.nextID+1, s.routeTime(), 1
	if !tbl.create(r) {
		return store.Route{}, store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
	}
	tbl.nextID++
	t.recordRoute(routeCreate, tbl, store.Route{ID: r.ID}) // one undo for the id and the record
	return r, nil
}

// GetRoute implements store.Store.
func (s *Store) GetRoute(ctx context.Context, id int64) (store.Route, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Route{}, err
	}
	defer unlock()
	r, ok := s.routes.get(id)
	if !ok {
		return store.Route{}, store.NotFound("route", itoa(id))
	}
	return r, nil
}

// ListRoutes implements store.Store.
func (s *Store) ListRoutes(ctx context.Context, f store.RouteFilter) ([]store.Route, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.routes.list(f), nil
}

// UpdateRoute implements store.Store.
func (s *Store) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (store.Route, error) {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return store.Route{}, err
	}
	defer unlock()
	old, ok := s.routes.get(id)
	if !ok {
		return store.Route{}, store.NotFound("route", itoa(id))
	}
	r, err := u.Apply(old)
	if err != nil {
		return store.Route{}, err
	}
	if !sameKey(r, old) && s.routes.has(r) {
		return store.Route{}, store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
	}
	r.LastUpdated = s.routeTime()
	s.putRoute(t, r)
	return r, nil
}

// DeleteRoute implements store.Store.
func (s *Store) DeleteRoute(ctx context.Context, id int64) error {
	return s.deleteRoute(ctx, id, nil)
}

// DeleteRouteIf implements store.Store.
func (s *Store) DeleteRouteIf(ctx context.Context, id int64, version int64) error {
	return s.deleteRoute(ctx, id, &version)
}

func (s *Store) deleteRoute(ctx context.Context, id int64, version *int64) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	r, ok := s.routes.get(id)
	if !ok {
		return store.NotFound("route", itoa(id))
	}
	if err := store.CheckVersion("route "+itoa(id), r.Version, version); err != nil {
		return err
	}
	s.removeRoute(t, id)
	return nil
}
