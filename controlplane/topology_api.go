package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// AddSegment creates an empty segment (API mode only). A name containing "$group" is a
// template, instantiated per registered group as in the config file.
func (s *Service) AddSegment(ctx context.Context, name string) (Result, error) {
	if err := config.ValidSegmentName(name); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return s.mutateTopology(ctx, func(ctx context.Context) error { return s.store.CreateSegment(ctx, name) })
}

// RemoveSegment deletes a segment and its links (API mode only); links no segment allows
// any more are soft-deleted.
func (s *Service) RemoveSegment(ctx context.Context, name string) (Result, error) {
	return s.mutateTopology(ctx, func(ctx context.Context) error { return s.store.DeleteSegment(ctx, name) })
}

// AddSegmentLink connects groups a and b in segment (API mode only). Either may be "*";
// "$group" is allowed in a segment whose name holds it. An empty segment is
// DefaultSegment, made on first use, so a fabric with one routing domain needs no
// segment named.
func (s *Service) AddSegmentLink(ctx context.Context, segment, a, b string) (Result, error) {
	segment = orDefault(segment)
	if err := checkSegmentLink(segment, a, b); err != nil {
		return Result{}, err
	}
	return s.mutateTopology(ctx, func(ctx context.Context) error {
		if segment == DefaultSegment {
			if err := s.store.CreateSegment(ctx, segment); err != nil && !errors.Is(err, store.ErrExists) {
				return err
			}
		}
		return s.store.AddSegmentLink(ctx, store.NewSegmentLink(segment, a, b))
	})
}

// RemoveSegmentLink disconnects groups a and b in segment (API mode only); an empty
// segment is DefaultSegment.
func (s *Service) RemoveSegmentLink(ctx context.Context, segment, a, b string) (Result, error) {
	segment = orDefault(segment)
	l := store.NewSegmentLink(segment, a, b)
	return s.mutateTopology(ctx, func(ctx context.Context) error {
		if err := s.hasSegmentLink(ctx, l); err != nil {
			return err
		}
		return s.store.RemoveSegmentLink(ctx, l)
	})
}

// hasSegmentLink fails with store.ErrNotFound naming the link when its segment does
// not hold it: removing a link that is not there is a mistake worth saying (a typo in
// a group's name), and "segment not found" would point at the wrong thing.
func (s *Service) hasSegmentLink(ctx context.Context, l store.SegmentLink) error {
	segs, err := s.store.ListSegments(ctx)
	if err != nil {
		return err
	}
	for _, seg := range segs {
		if seg.Name == l.Segment && slices.Contains(seg.Links, l) {
			return nil
		}
	}
	return fmt.Errorf("%w: link %s <-> %s in segment %q", store.ErrNotFound, l.GroupA, l.GroupB, l.Segment)
}

func orDefault(segment string) string {
	if segment == "" {
		return DefaultSegment
	}
	return segment
}

func checkSegmentLink(segment, a, b string) error {
	template := strings.Contains(segment, config.GroupVar)
	for _, g := range []string{a, b} {
		switch {
		case g == config.Wildcard, g == config.GroupVar && template:
		case g == config.GroupVar:
			return fmt.Errorf("%w: %s needs a segment whose name contains it", ErrInvalidArgument, config.GroupVar)
		default:
			if err := config.ValidGroupName(g); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
			}
		}
	}
	if a == b && a != config.Wildcard {
		return fmt.Errorf("%w: group %q cannot link to itself", ErrInvalidArgument, a)
	}
	return nil
}

// mutateTopology refuses in config mode, applies change, then brings links and routes in
// line with the new topology, all in one store transaction: a topology change whose
// links or routes cannot be written is not kept either.
func (s *Service) mutateTopology(ctx context.Context, change func(ctx context.Context) error) (Result, error) {
	if s.Mode() == config.ConfigMode {
		return Result{}, ErrConfigMode
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	err := s.atomically(ctx, func(ctx context.Context) error {
		if err := change(ctx); err != nil {
			return err
		}
		return s.syncTopology(ctx, w)
	})
	if err != nil {
		return Result{}, err
	}
	return w.result(), nil
}

// syncTopology soft-deletes links the topology no longer allows, creates the links it
// now wants (each group, in order, acting through a random connected node), and
// re-expands the routes.
func (s *Service) syncTopology(ctx context.Context, w *work) error {
	topo, err := s.topoNow(ctx)
	if err != nil {
		return err
	}
	allowed, _ := topo.pairs()
	groups := topo.groups
	links, err := s.store.ListLinks(ctx, store.LinkFilter{})
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if allowed[pair(l.SourceGroup, l.DestGroup)] {
			continue
		}
		if _, err := store.MarkLinkDeleted(ctx, s.store, l.ID); err != nil {
			return fmt.Errorf("delete link %s: %w", l.ID, err)
		}
		w.link(l.SourceNodeID)
		w.relinked(l.ID)
	}
	for _, g := range groups {
		nodes, err := s.store.ListNodes(ctx, store.NodeFilter{Group: g, ConnectedOnly: true})
		if err != nil {
			return fmt.Errorf("list nodes of group %s: %w", g, err)
		}
		if len(nodes) == 0 {
			continue
		}
		if err := s.ensureLinks(ctx, nodes[s.pick(len(nodes))], w); err != nil {
			return err
		}
	}
	w.relinked("")
	return s.replan(ctx, w)
}
