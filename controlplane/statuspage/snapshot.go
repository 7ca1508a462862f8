package statuspage

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// MaxRows bounds each table of the page: a fabric of thousands of nodes has a
// million routes, and the page lists the ones that need attention first.
const MaxRows = 100

// Snapshot is what the page shows, also served as JSON.
type Snapshot struct {
	Generated time.Time        `json:"generated"`
	Mode      string           `json:"mode"`
	Groups    []GroupView      `json:"groups"`
	Links     Table[LinkView]  `json:"links"`
	Routes    Table[RouteView] `json:"routes"`
	Segments  SegmentTable     `json:"segments"`
	Errors    []ReconcileError `json:"errors"`
}

// GroupView is a group and its nodes.
type GroupView struct {
	Name  string     `json:"name"`
	Nodes []NodeView `json:"nodes"`
}

// NodeView is one node. NotAnsweringSince is set while the node does not answer the
// reconcilers' requests: when it was sent the first one it left unanswered.
type NodeView struct {
	ID                string     `json:"id"`
	Connected         bool       `json:"connected"`
	Gateway           bool       `json:"gateway"`
	Endpoints         []string   `json:"endpoints"`
	NotAnsweringSince *time.Time `json:"notAnsweringSince,omitempty"`
}

// Table is a list shown in part: counts by state over all rows, and the first
// MaxRows rows, those in trouble first.
type Table[T any] struct {
	Total   int            `json:"total"`
	ByState map[string]int `json:"byState"`
	Rows    []T            `json:"rows"`
}

// LinkView is one link.
type LinkView struct {
	ID        string `json:"id"`
	Source    string `json:"source"`
	DestGroup string `json:"destGroup"`
	DestNode  string `json:"destNode"`
	State     string `json:"state"`
	Message   string `json:"message"`
}

// RouteView is one route expansion (wildcard templates are the announcements and
// counted apart).
type RouteView struct {
	Name    string `json:"name"`
	Source  string `json:"source"`
	Dest    string `json:"dest"`
	Link    string `json:"link"`
	State   string `json:"state"`
	Message string `json:"message"`
}

// attention orders states for the tables: what needs a look comes first.
var attention = map[string]int{"failed": 0, "pending": 1, "connecting": 2, "deleted": 3, "applied": 4}

func build(ctx context.Context, o Options, now time.Time) (Snapshot, error) {
	s := Snapshot{Generated: now, Mode: o.Mode, Errors: []ReconcileError{}}
	st := o.Store
	nodes, err := st.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return s, fmt.Errorf("list nodes: %w", err)
	}
	links, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return s, fmt.Errorf("list links: %w", err)
	}
	routes, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return s, fmt.Errorf("list routes: %w", err)
	}
	if s.Segments, err = segments(ctx, o, nodes); err != nil {
		return s, err
	}
	var silent map[string]time.Time
	if o.Errors != nil {
		s.Errors, silent = o.Errors.Recent(), o.Errors.NotAnswering()
	}
	s.Groups = groupViews(nodes, links, silent)
	s.Links = table(links, func(l store.Link) (LinkView, bool) {
		return LinkView{ID: l.ID, Source: l.SourceNodeID, DestGroup: l.DestGroup, DestNode: l.DestNodeID,
			State: l.Status.String(), Message: l.StatusMessage}, true
	}, func(v LinkView) string { return v.State }, func(a, b LinkView) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.ID, b.ID))
	})
	s.Routes = table(routes, func(r store.Route) (RouteView, bool) {
		if r.IsTemplate() {
			return RouteView{}, false
		}
		return RouteView{Name: r.Name.String(), Source: r.SourceNodeID, Dest: r.DestNodeID, Link: r.LinkID,
			State: r.Status.String(), Message: r.StatusMessage}, true
	}, func(v RouteView) string { return v.State }, func(a, b RouteView) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Source, b.Source))
	})
	return s, nil
}

func groupViews(nodes []store.Node, links []store.Link, silent map[string]time.Time) []GroupView {
	gateway := map[string]bool{}
	for _, l := range links {
		if !l.Deleted {
			gateway[l.SourceNodeID] = true
			if l.DestNodeID != "" {
				gateway[l.DestNodeID] = true
			}
		}
	}
	var out []GroupView
	index := map[string]int{}
	for _, n := range nodes {
		i, ok := index[n.Group]
		if !ok {
			i = len(out)
			index[n.Group] = i
			out = append(out, GroupView{Name: n.Group})
		}
		v := NodeView{ID: n.ID, Connected: n.Connected, Gateway: gateway[n.ID], Endpoints: []string{}}
		for _, d := range n.ConnDetails {
			ep := d.Endpoint
			if d.ExternalEndpoint != "" {
				ep += " (external " + d.ExternalEndpoint + ")"
			}
			v.Endpoints = append(v.Endpoints, ep)
		}
		if since, ok := silent[n.ID]; ok && n.Connected {
			v.NotAnsweringSince = &since
		}
		out[i].Nodes = append(out[i].Nodes, v)
	}
	slices.SortStableFunc(out, func(a, b GroupView) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// table counts the views of records by state and keeps the first MaxRows, ordered
// by attention and then by order.
func table[R, V any](records []R, view func(R) (V, bool), state func(V) string, order func(a, b V) int) Table[V] {
	t := Table[V]{ByState: map[string]int{}, Rows: []V{}}
	var all []V
	for _, r := range records {
		v, ok := view(r)
		if !ok {
			continue
		}
		t.Total++
		t.ByState[state(v)]++
		all = append(all, v)
	}
	slices.SortFunc(all, func(a, b V) int {
		return cmp.Or(cmp.Compare(attention[state(a)], attention[state(b)]), order(a, b))
	})
	if len(all) > MaxRows {
		all = all[:MaxRows]
	}
	t.Rows = append(t.Rows, all...)
	return t
}
