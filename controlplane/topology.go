package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// DefaultSegment names the one routing domain of a topology without segments.
const DefaultSegment = "default"

// Segment is a routing domain resolved against the registered groups: each "*"
// expanded, each "$group" template instantiated. Edges are undirected, each pair once
// with the smaller group first, sorted.
type Segment struct {
	Name  string
	Edges [][2]string
}

// Groups returns the groups that take part in the segment, sorted.
func (s Segment) Groups() []string {
	var out []string
	for _, e := range s.Edges {
		out = append(out, e[0], e[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Resolve turns topology rules into concrete segments over groups (the registered ones).
// With segments, the top-level links are ignored, as the spec says; without, the links
// form DefaultSegment. Groups outside the list have no nodes and so take no part.
func Resolve(t *config.Topology, groups []string) []Segment {
	if t.IsEmpty() {
		return nil
	}
	registered := make(map[string]bool, len(groups))
	for _, g := range groups {
		registered[g] = true
	}
	if len(t.Segments) == 0 {
		return []Segment{{Name: DefaultSegment, Edges: resolveLinks(t.Links, groups, registered)}}
	}
	var out []Segment
	for _, spec := range t.Segments {
		if !spec.UsesGroupVar() {
			out = append(out, Segment{Name: spec.Name, Edges: resolveLinks(spec.Links, groups, registered)})
			continue
		}
		for _, g := range groups {
			inst := instantiate(spec, g)
			out = append(out, Segment{Name: inst.Name, Edges: resolveLinks(inst.Links, groups, registered)})
		}
	}
	slices.SortStableFunc(out, func(a, b Segment) int { return cmp.Compare(a.Name, b.Name) })
	// Two definitions can yield one name (a template and a named segment): merge them.
	return mergeSameName(out)
}

// instantiate replaces "$group" with g, in the name anywhere and in links as a whole
// token.
func instantiate(spec config.Segment, g string) config.Segment {
	inst := config.Segment{Name: strings.ReplaceAll(spec.Name, config.GroupVar, g)}
	sub := func(s string) string {
		if s == config.GroupVar {
			return g
		}
		return s
	}
	for _, l := range spec.Links {
		nl := config.Link{Group: sub(l.Group)}
		for _, n := range l.Neighbors {
			nl.Neighbors = append(nl.Neighbors, sub(n))
		}
		inst.Links = append(inst.Links, nl)
	}
	return inst
}

func resolveLinks(links []config.Link, groups []string, registered map[string]bool) [][2]string {
	expand := func(g string) []string {
		if g == config.Wildcard {
			return groups
		}
		if registered[g] {
			return []string{g}
		}
		return nil
	}
	var edges [][2]string
	for _, l := range links {
		for _, a := range expand(l.Group) {
			for _, n := range l.Neighbors {
				for _, b := range expand(n) {
					if a != b {
						edges = append(edges, pair(a, b))
					}
				}
			}
		}
	}
	slices.SortFunc(edges, comparePairs)
	return slices.Compact(edges)
}

func mergeSameName(segs []Segment) []Segment {
	var out []Segment
	for _, s := range segs {
		if n := len(out); n > 0 && out[n-1].Name == s.Name {
			merged := append(out[n-1].Edges, s.Edges...)
			slices.SortFunc(merged, comparePairs)
			out[n-1].Edges = slices.Compact(merged)
			continue
		}
		out = append(out, s)
	}
	return out
}

func pair(a, b string) [2]string {
	if b < a {
		return [2]string{b, a}
	}
	return [2]string{a, b}
}

func comparePairs(x, y [2]string) int {
	if c := cmp.Compare(x[0], y[0]); c != 0 {
		return c
	}
	return cmp.Compare(x[1], y[1])
}

// SegmentRules expresses stored segments as topology rules, so both modes resolve
// the same way ("*" and "$group" work in API mode too). No segments are no rules.
func SegmentRules(segs []store.Segment) *config.Topology {
	t := &config.Topology{}
	for _, seg := range segs {
		spec := config.Segment{Name: seg.Name}
		for _, l := range seg.Links {
			spec.Links = append(spec.Links, config.Link{Group: l.GroupA, Neighbors: []string{l.GroupB}})
		}
		t.Segments = append(t.Segments, spec)
	}
	if len(t.Segments) == 0 {
		return nil
	}
	return t
}

// Pending returns the links of t between two named groups — neither "*" nor
// "$group" — that the resolved segments lack: a group of the pair has no node yet,
// so the link waits for one. Operators see such links in the drawing and on the
// status page, which would otherwise hide them until the group's first node
// registers. Each is listed under the segment that holds it (DefaultSegment for
// top-level links), edges ordered as in Segment; segments without one are left out.
func Pending(t *config.Topology, resolved []Segment) []Segment {
	if t.IsEmpty() {
		return nil
	}
	have := allowedPairs(resolved)
	specs := t.Segments
	if len(specs) == 0 {
		specs = []config.Segment{{Name: DefaultSegment, Links: t.Links}}
	}
	var out []Segment
	for _, spec := range specs {
		if edges := missingEdges(spec.Links, have); len(edges) > 0 {
			out = append(out, Segment{Name: spec.Name, Edges: edges})
		}
	}
	slices.SortStableFunc(out, func(a, b Segment) int { return cmp.Compare(a.Name, b.Name) })
	return mergeSameName(out)
}

// missingEdges are the edges between named groups among links that have is without.
func missingEdges(links []config.Link, have map[[2]string]bool) [][2]string {
	named := func(g string) bool { return g != config.Wildcard && g != config.GroupVar }
	var edges [][2]string
	for _, l := range links {
		for _, n := range l.Neighbors {
			if e := pair(l.Group, n); named(l.Group) && named(n) && l.Group != n && !have[e] {
				edges = append(edges, e)
			}
		}
	}
	slices.SortFunc(edges, comparePairs)
	return slices.Compact(edges)
}

// resolved is the topology in force resolved against one set of registered groups.
// It is never changed once made, so every caller shares the latest one: resolving a
// "* <-> *" topology over a hundred groups builds and sorts thousands of edges, which
// each registration and each plan would otherwise redo although the groups rarely
// change.
type resolved struct {
	rules  *config.Topology // config mode: the file's section
	stored []store.Segment  // API mode: the stored segments they were made from
	groups []string
	segs   []Segment

	once    sync.Once
	allowed map[[2]string]bool
	peers   map[string][]string
}

// pairs returns the group pairs any segment connects, and each group's peers, sorted.
func (r *resolved) pairs() (map[[2]string]bool, map[string][]string) {
	r.once.Do(func() {
		r.allowed = allowedPairs(r.segs)
		r.peers = map[string][]string{}
		for e := range r.allowed {
			r.peers[e[0]] = append(r.peers[e[0]], e[1])
			r.peers[e[1]] = append(r.peers[e[1]], e[0])
		}
		for g, ps := range r.peers {
			slices.Sort(ps)
			r.peers[g] = ps
		}
	})
	return r.allowed, r.peers
}

// segmentsOf returns, sorted, the segments that link groups a and b.
func (r *resolved) segmentsOf(a, b string) []string {
	var out []string
	for _, seg := range r.segs {
		if slices.ContainsFunc(seg.Edges, func(e [2]string) bool { return e == [2]string{a, b} || e == [2]string{b, a} }) {
			out = append(out, seg.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// resolved returns the topology resolved against the registered groups as the store
// lists them, for callers outside the service lock.
func (s *Service) resolved(ctx context.Context) (*resolved, error) {
	groups, err := s.store.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	return s.resolveFor(ctx, groups)
}

// topoNow is resolved for the service's operations, under mu: the groups come from
// the service's own record of them.
func (s *Service) topoNow(ctx context.Context) (*resolved, error) {
	groups, err := s.groupView(ctx)
	if err != nil {
		return nil, err
	}
	return s.resolveFor(ctx, groups)
}

// resolveFor returns the topology resolved against groups, from the cache when
// neither the rules nor the groups changed since it was made.
func (s *Service) resolveFor(ctx context.Context, groups []string) (*resolved, error) {
	var stored []store.Segment
	if s.topology == nil {
		var err error
		if stored, err = s.store.ListSegments(ctx); err != nil {
			return nil, fmt.Errorf("list segments: %w", err)
		}
	}
	s.topoMu.Lock()
	defer s.topoMu.Unlock()
	if c := s.topo; c != nil && c.rules == s.topology && slices.Equal(c.groups, groups) && reflect.DeepEqual(c.stored, stored) {
		return c, nil
	}
	rules := s.topology
	if rules == nil {
		rules = SegmentRules(stored)
	}
	s.topo = &resolved{rules: s.topology, stored: stored, groups: groups, segs: Resolve(rules, groups)}
	return s.topo, nil
}

// resolve returns the segments over the registered groups.
func (s *Service) resolve(ctx context.Context) ([]Segment, []string, error) {
	r, err := s.resolved(ctx)
	if err != nil {
		return nil, nil, err
	}
	return r.segs, r.groups, nil
}

// allowedPairs is the set of group pairs any segment connects.
func allowedPairs(segs []Segment) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, s := range segs {
		for _, e := range s.Edges {
			out[e] = true
		}
	}
	return out
}

// Segments returns the segments in force, resolved against the registered groups.
func (s *Service) Segments(ctx context.Context) ([]Segment, error) {
	segs, _, err := s.resolve(ctx)
	return segs, err
}
