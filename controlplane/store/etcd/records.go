package etcd

import (
	"context"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Every method below does the cache's work and notes the key it changed; write
// commits it (or the enclosing transaction does).

// SaveNode implements store.Store.
func (s *Store) SaveNode(ctx context.Context, n store.Node) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(nodeKey(n.ID))
		return t.mem.SaveNode(ctx, n)
	})
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return store.Node{}, err
	}
	return m.GetNode(ctx, id)
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListNodes(ctx, f)
}

// ListGroups implements store.Store.
func (s *Store) ListGroups(ctx context.Context) ([]string, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListGroups(ctx)
}

// SetNodeConnected implements store.Store.
func (s *Store) SetNodeConnected(ctx context.Context, id string, connected bool) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(nodeKey(id))
		return t.mem.SetNodeConnected(ctx, id, connected)
	})
}

// DeleteNode implements store.Store.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(nodeKey(id))
		return t.mem.DeleteNode(ctx, id)
	})
}

// CreateLink implements store.Store.
func (s *Store) CreateLink(ctx context.Context, l store.Link) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(linkKey(l.ID))
		return t.mem.CreateLink(ctx, l)
	})
}

// GetLink implements store.Store.
func (s *Store) GetLink(ctx context.Context, id string) (store.Link, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return store.Link{}, err
	}
	return m.GetLink(ctx, id)
}

// ListLinks implements store.Store.
func (s *Store) ListLinks(ctx context.Context, f store.LinkFilter) ([]store.Link, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListLinks(ctx, f)
}

// UpdateLink implements store.Store.
func (s *Store) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (l store.Link, err error) {
	err = s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(linkKey(id))
		l, err = t.mem.UpdateLink(ctx, id, u)
		return err
	})
	if err != nil {
		return store.Link{}, err
	}
	return l, nil
}

// DeleteLink implements store.Store.
func (s *Store) DeleteLink(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(linkKey(id))
		return t.mem.DeleteLink(ctx, id)
	})
}

// DeleteLinkIf implements store.Store.
func (s *Store) DeleteLinkIf(ctx context.Context, id string, version int64) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(linkKey(id))
		return t.mem.DeleteLinkIf(ctx, id, version)
	})
}

// CreateRoute implements store.Store.
func (s *Store) CreateRoute(ctx context.Context, r store.Route) (out store.Route, err error) {
	err = s.write(ctx, func(ctx context.Context, t *tx) error {
		if out, err = t.mem.CreateRoute(ctx, r); err != nil {
			return err
		}
		t.touch(routeKey(out.ID))
		t.lastID = max(t.lastID, out.ID)
		return nil
	})
	if err != nil {
		return store.Route{}, err
	}
	return out, nil
}

// GetRoute implements store.Store.
func (s *Store) GetRoute(ctx context.Context, id int64) (store.Route, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return store.Route{}, err
	}
	return m.GetRoute(ctx, id)
}

// ListRoutes implements store.Store.
func (s *Store) ListRoutes(ctx context.Context, f store.RouteFilter) ([]store.Route, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListRoutes(ctx, f)
}

// UpdateRoute implements store.Store.
func (s *Store) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (r store.Route, err error) {
	err = s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(routeKey(id))
		r, err = t.mem.UpdateRoute(ctx, id, u)
		return err
	})
	if err != nil {
		return store.Route{}, err
	}
	return r, nil
}

// DeleteRoute implements store.Store.
func (s *Store) DeleteRoute(ctx context.Context, id int64) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(routeKey(id))
		return t.mem.DeleteRoute(ctx, id)
	})
}

// DeleteRouteIf implements store.Store.
func (s *Store) DeleteRouteIf(ctx context.Context, id int64, version int64) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(routeKey(id))
		return t.mem.DeleteRouteIf(ctx, id, version)
	})
}
