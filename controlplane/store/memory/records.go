package memory

import (
	"cmp"
	"context"
	"slices"

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

// SaveNode implements store.Store.
func (s *Store) SaveNode(ctx context.Context, n store.Node) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	n = cloneNode(n)
	n.LastUpdated = s.now()
	keep(t, s.nodes, n.ID)
	s.nodes[n.ID] = n
	return nil
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Node{}, err
	}
	defer unlock()
	n, ok := s.nodes[id]
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
	out := sortedValues(s.nodes, func(n store.Node) bool {
		return (f.Group == "" || n.Group == f.Group) && (!f.ConnectedOnly || n.Connected)
	}, func(n store.Node) string { return n.ID })
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
	seen := map[string]struct{}{}
	for _, n := range s.nodes {
		if n.Group != "" {
			seen[n.Group] = struct{}{}
		}
	}
	out := make([]string, 0, len(seen))
	for g := range seen {
		out = append(out, g)
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
	n, ok := s.nodes[id]
	if !ok {
		return store.NotFound("node", id)
	}
	n.Connected, n.LastUpdated = connected, s.now()
	keep(t, s.nodes, id)
	s.nodes[id] = n
	return nil
}

// DeleteNode implements store.Store.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.nodes[id]; !ok {
		return store.NotFound("node", id)
	}
	keep(t, s.nodes, id)
	delete(s.nodes, id)
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
	if _, ok := s.links[l.ID]; ok {
		return store.Exists("link", l.ID)
	}
	l.LastUpdated, l.Version = s.now(), 1
	keep(t, s.links, l.ID)
	s.links[l.ID] = l
	return nil
}

// GetLink implements store.Store.
func (s *Store) GetLink(ctx context.Context, id string) (store.Link, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Link{}, err
	}
	defer unlock()
	l, ok := s.links[id]
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
	return sortedValues(s.links, f.Match, func(l store.Link) string { return l.ID }), nil
}

// UpdateLink implements store.Store.
func (s *Store) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return store.Link{}, err
	}
	defer unlock()
	l, ok := s.links[id]
	if !ok {
		return store.Link{}, store.NotFound("link", id)
	}
	l, err = u.Apply(l)
	if err != nil {
		return store.Link{}, err
	}
	l.LastUpdated = s.now()
	keep(t, s.links, id)
	s.links[id] = l
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
	l, ok := s.links[id]
	if !ok {
		return store.NotFound("link", id)
	}
	if err := store.CheckVersion("link "+id, l.Version, version); err != nil {
		return err
	}
	keep(t, s.links, id)
	delete(s.links, id)
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
	key := r.Key()
	if _, ok := s.routeKey[key]; ok {
		return store.Route{}, store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
	}
	s.keepNextID(t)
	s.nextID++
	r.ID, r.LastUpdated, r.Version = s.nextID, s.now(), 1
	keep(t, s.routes, r.ID)
	keep(t, s.routeKey, key)
	s.routes[r.ID], s.routeKey[key] = r, r.ID
	return r, nil
}

// GetRoute implements store.Store.
func (s *Store) GetRoute(ctx context.Context, id int64) (store.Route, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return store.Route{}, err
	}
	defer unlock()
	r, ok := s.routes[id]
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
	out := make([]store.Route, 0)
	for _, r := range s.routes {
		if f.Match(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Route) int { return cmp.Compare(routeOrder(a), routeOrder(b)) })
	return out, nil
}

// UpdateRoute implements store.Store.
func (s *Store) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (store.Route, error) {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return store.Route{}, err
	}
	defer unlock()
	old, ok := s.routes[id]
	if !ok {
		return store.Route{}, store.NotFound("route", itoa(id))
	}
	r, err := u.Apply(old)
	if err != nil {
		return store.Route{}, err
	}
	if newKey := r.Key(); newKey != old.Key() {
		if _, taken := s.routeKey[newKey]; taken {
			return store.Route{}, store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
		}
		keep(t, s.routeKey, old.Key())
		keep(t, s.routeKey, newKey)
		delete(s.routeKey, old.Key())
		s.routeKey[newKey] = id
	}
	r.LastUpdated = s.now()
	keep(t, s.routes, id)
	s.routes[id] = r
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
	r, ok := s.routes[id]
	if !ok {
		return store.NotFound("route", itoa(id))
	}
	if err := store.CheckVersion("route "+itoa(id), r.Version, version); err != nil {
		return err
	}
	keep(t, s.routes, id)
	keep(t, s.routeKey, r.Key())
	delete(s.routes, id)
	delete(s.routeKey, r.Key())
	return nil
}
