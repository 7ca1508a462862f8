package etcd

import (
	"context"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// A segment is one key holding its links: the API changes one segment at a time, and
// DeleteSegment then removes its links with it.

// CreateSegment implements store.Store.
func (s *Store) CreateSegment(ctx context.Context, name string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(segmentKey(name))
		return t.mem.CreateSegment(ctx, name)
	})
}

// DeleteSegment implements store.Store.
func (s *Store) DeleteSegment(ctx context.Context, name string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(segmentKey(name))
		return t.mem.DeleteSegment(ctx, name)
	})
}

// ListSegments implements store.Store.
func (s *Store) ListSegments(ctx context.Context) ([]store.Segment, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListSegments(ctx)
}

// AddSegmentLink implements store.Store.
func (s *Store) AddSegmentLink(ctx context.Context, l store.SegmentLink) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(segmentKey(l.Segment))
		return t.mem.AddSegmentLink(ctx, l)
	})
}

// RemoveSegmentLink implements store.Store.
func (s *Store) RemoveSegmentLink(ctx context.Context, l store.SegmentLink) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(segmentKey(l.Segment))
		return t.mem.RemoveSegmentLink(ctx, l)
	})
}

// SetGroupSecret implements store.Store.
func (s *Store) SetGroupSecret(ctx context.Context, group, secret string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(secretKey(group))
		return t.mem.SetGroupSecret(ctx, group, secret)
	})
}

// DeleteGroupSecret implements store.Store.
func (s *Store) DeleteGroupSecret(ctx context.Context, group string) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		t.touch(secretKey(group))
		return t.mem.DeleteGroupSecret(ctx, group)
	})
}

// ListGroupSecrets implements store.Store.
func (s *Store) ListGroupSecrets(ctx context.Context) (map[string]string, error) {
	m, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	return m.ListGroupSecrets(ctx)
}

// ClearRuntime implements store.Store.
func (s *Store) ClearRuntime(ctx context.Context) error {
	return s.clear(ctx, false)
}

// ClearAll implements store.Store.
func (s *Store) ClearAll(ctx context.Context) error {
	return s.clear(ctx, true)
}

func (s *Store) clear(ctx context.Context, all bool) error {
	return s.write(ctx, func(ctx context.Context, t *tx) error {
		if t.implicit {
			t.prefixes = []string{nodesDir, linksDir, routesDir}
			if all {
				t.prefixes = append(t.prefixes, segmentsDir, secretsDir)
			}
		} else if err := touchAll(ctx, t, all); err != nil {
			return err
		}
		if all {
			return t.mem.ClearAll(ctx)
		}
		return t.mem.ClearRuntime(ctx)
	})
}

// touchAll notes every record a clear inside a transaction removes.
func touchAll(ctx context.Context, t *tx, all bool) error {
	nodes, err := t.mem.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		t.touch(nodeKey(n.ID))
	}
	links, err := t.mem.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return err
	}
	for _, l := range links {
		t.touch(linkKey(l.ID))
	}
	routes, err := t.mem.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return err
	}
	for _, r := range routes {
		t.touch(routeKey(r.ID))
	}
	if !all {
		return nil
	}
	segs, err := t.mem.ListSegments(ctx)
	if err != nil {
		return err
	}
	for _, seg := range segs {
		t.touch(segmentKey(seg.Name))
	}
	secrets, err := t.mem.ListGroupSecrets(ctx)
	for g := range secrets {
		t.touch(secretKey(g))
	}
	return err
}
