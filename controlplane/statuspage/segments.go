package statuspage

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// SegmentTable lists the segments by group pair: the pairs in force (both groups
// have nodes) and those that wait for a node of a group (pending), at most MaxRows
// rows, each segment's pending pairs first.
type SegmentTable struct {
	// Known is false in config mode when the page was not given the config file's
	// topology: the store holds no segments then.
	Known   bool         `json:"known"`
	Count   int          `json:"count"`   // segments
	Total   int          `json:"total"`   // group pairs, pending ones included
	Pending int          `json:"pending"` // group pairs waiting for nodes
	Rows    []SegmentRow `json:"rows"`
	// Truncated says rows beyond MaxRows were left out.
	Truncated bool `json:"truncated"`
}

// SegmentRow is a group pair of a segment, or a segment that links no pair (its
// groups empty).
type SegmentRow struct {
	Segment string `json:"segment"`
	GroupA  string `json:"groupA"`
	GroupB  string `json:"groupB"`
	Pending bool   `json:"pending"`
	// Waiting are the groups of a pending pair without a node.
	Waiting []string `json:"waiting,omitempty"`
	// First marks a segment's first row, which names it on the page.
	First bool `json:"-"`
}

// segments resolves the topology in force over the groups that have nodes, as the
// control plane does: in API mode the stored segments, in config mode the file's.
func segments(ctx context.Context, o Options, nodes []store.Node) (SegmentTable, error) {
	rules := o.Topology
	if rules == nil {
		if o.Mode == config.ConfigMode.String() {
			return SegmentTable{Rows: []SegmentRow{}}, nil
		}
		stored, err := o.Store.ListSegments(ctx)
		if err != nil {
			return SegmentTable{}, fmt.Errorf("list segments: %w", err)
		}
		rules = controlplane.SegmentRules(stored)
	}
	return segmentTable(rules, groupsOf(nodes)), nil
}

// groupsOf returns the groups of nodes, sorted: the registered groups.
func groupsOf(nodes []store.Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Group != "" {
			out = append(out, n.Group)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// segmentTable lists, per segment in name order, the pairs waiting for nodes and then
// the pairs in force.
func segmentTable(rules *config.Topology, groups []string) SegmentTable {
	resolved := controlplane.Resolve(rules, groups)
	t := SegmentTable{Known: true, Rows: []SegmentRow{}}
	names := map[string]bool{}
	rows := map[string][]SegmentRow{}
	for _, seg := range controlplane.Pending(rules, resolved) {
		names[seg.Name] = true
		t.Pending += len(seg.Edges)
		for _, e := range seg.Edges {
			rows[seg.Name] = append(rows[seg.Name], SegmentRow{Segment: seg.Name, GroupA: e[0], GroupB: e[1],
				Pending: true, Waiting: withoutNodes(e, groups)})
		}
	}
	for _, seg := range resolved {
		names[seg.Name] = true // a segment that links no pair is shown too
		for _, e := range seg.Edges {
			rows[seg.Name] = append(rows[seg.Name], SegmentRow{Segment: seg.Name, GroupA: e[0], GroupB: e[1]})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		segRows := rows[name]
		t.Count++
		t.Total += len(segRows)
		if len(segRows) == 0 {
			segRows = []SegmentRow{{Segment: name}}
		}
		segRows[0].First = true
		t.Rows = append(t.Rows, segRows...)
	}
	if len(t.Rows) > MaxRows {
		t.Rows, t.Truncated = t.Rows[:MaxRows], true
	}
	return t
}

// withoutNodes returns the groups of pair that are not among groups (sorted).
func withoutNodes(pair [2]string, groups []string) []string {
	var out []string
	for _, g := range pair {
		if _, found := slices.BinarySearch(groups, g); !found {
			out = append(out, g)
		}
	}
	return out
}
