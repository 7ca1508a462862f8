package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// CreateSegment implements store.Store.
func (s *Store) CreateSegment(ctx context.Context, name string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.segments[name]; ok {
		return store.Exists("segment", name)
	}
	keep(t, s.segments, name)
	s.segments[name] = map[store.SegmentLink]struct{}{}
	return nil
}

// DeleteSegment implements store.Store.
func (s *Store) DeleteSegment(ctx context.Context, name string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.segments[name]; !ok {
		return store.NotFound("segment", name)
	}
	keep(t, s.segments, name)
	delete(s.segments, name)
	return nil
}

// ListSegments implements store.Store.
func (s *Store) ListSegments(ctx context.Context) ([]store.Segment, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]store.Segment, 0, len(s.segments))
	for name, links := range s.segments {
		seg := store.Segment{Name: name, Links: make([]store.SegmentLink, 0, len(links))}
		for l := range links {
			seg.Links = append(seg.Links, l)
		}
		slices.SortFunc(seg.Links, compareSegmentLinks)
		out = append(out, seg)
	}
	slices.SortFunc(out, func(a, b store.Segment) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// AddSegmentLink implements store.Store.
func (s *Store) AddSegmentLink(ctx context.Context, l store.SegmentLink) error {
	l = store.NewSegmentLink(l.Segment, l.GroupA, l.GroupB)
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	links, ok := s.segments[l.Segment]
	if !ok {
		return store.NotFound("segment", l.Segment)
	}
	if _, dup := links[l]; dup {
		return store.Exists("segment link", l.GroupA+"-"+l.GroupB)
	}
	keep(t, links, l)
	links[l] = struct{}{}
	return nil
}

// RemoveSegmentLink implements store.Store.
func (s *Store) RemoveSegmentLink(ctx context.Context, l store.SegmentLink) error {
	l = store.NewSegmentLink(l.Segment, l.GroupA, l.GroupB)
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	links, ok := s.segments[l.Segment]
	if !ok {
		return store.NotFound("segment", l.Segment)
	}
	if _, found := links[l]; !found {
		return store.NotFound("segment link", l.GroupA+"-"+l.GroupB)
	}
	keep(t, links, l)
	delete(links, l)
	return nil
}

func compareSegmentLinks(a, b store.SegmentLink) int {
	if c := cmp.Compare(a.GroupA, b.GroupA); c != 0 {
		return c
	}
	return cmp.Compare(a.GroupB, b.GroupB)
}
