// Package topograph draws a picture of the fabric — groups with their nodes, the
// gateways among them, the links between nodes by state, and the group pairs each
// segment connects, or will connect once both groups have nodes — as Graphviz DOT
// or as a Mermaid flowchart, for `switchboard ctl topology`. The output depends on
// the input alone (everything is sorted), so it can be diffed and kept in version
// control. See docs/controlplane.md, "A picture of the fabric".
package topograph

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Fabric is what is drawn.
type Fabric struct {
	Groups   []Group
	Links    []Link
	Segments []Segment
}

// Group is a group of data-plane nodes.
type Group struct {
	Name  string
	Nodes []Node
}

// Node is one data-plane node; ID is "{group}/{node}".
type Node struct {
	ID        string
	Connected bool
}

// Link is a link from a node to another group's node; DestNode is empty until the
// receiving node claims it. Status is pending, connecting, applied, failed or deleted.
type Link struct {
	ID        string
	Source    string
	DestGroup string
	DestNode  string
	Status    string
}

// Segment is a routing domain and the group pairs it connects. Pending are the pairs
// it links that wait for a node of one of their groups: drawn dashed and labelled
// "no nodes yet", so that a link added before its group's first node is not
// invisible.
type Segment struct {
	Name    string
	Edges   [][2]string
	Pending [][2]string
}

// PendingLabel marks a segment's pending pair in the drawings.
const PendingLabel = "no nodes yet"

// Format names an output format.
type Format string

// The formats Write knows.
const (
	DOT     Format = "dot"
	Mermaid Format = "mermaid"
)

// ParseFormat checks a format's name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case DOT, Mermaid:
		return f, nil
	}
	return "", fmt.Errorf("unknown topology format %q (want %s or %s)", s, DOT, Mermaid)
}

// Write draws f in format.
func Write(w io.Writer, format Format, f Fabric) error {
	f = f.normalized()
	var b strings.Builder
	switch format {
	case DOT:
		writeDOT(&b, f)
	case Mermaid:
		writeMermaid(&b, f)
	default:
		_, err := ParseFormat(string(format))
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// linkStyle is how a link in one state is drawn.
type linkStyle struct {
	color string
	dot   string // DOT edge style
	arrow string // Mermaid arrow
}

// styles: applied links solid green, links on their way dashed, failed ones bold red,
// deleted ones dotted grey — the states an operator scans a picture for.
var styles = map[string]linkStyle{
	"applied":    {color: "#15803d", dot: "solid", arrow: "-->"},
	"pending":    {color: "#b45309", dot: "dashed", arrow: "-.->"},
	"connecting": {color: "#1d4ed8", dot: "dashed", arrow: "-.->"},
	"failed":     {color: "#b91c1c", dot: "bold", arrow: "==>"},
	"deleted":    {color: "#9ca3af", dot: "dotted", arrow: "-.->"},
}

// A segment's pairs are grey, like the frame of the picture; its pending pairs amber,
// the colour of links on their way.
const (
	segmentColor = "#6b7280"
	pendingColor = "#b45309"
)

func styleOf(status string) linkStyle {
	if s, ok := styles[status]; ok {
		return s
	}
	return linkStyle{color: "#000000", dot: "solid", arrow: "-->"}
}

// normalized sorts everything and adds the groups links and segments name but no
// node belongs to, so each output is a function of the content alone.
func (f Fabric) normalized() Fabric {
	groups := map[string]*Group{}
	for _, g := range f.Groups {
		cp := g
		cp.Nodes = slices.Clone(g.Nodes)
		groups[g.Name] = &cp
	}
	need := func(name string) {
		if _, ok := groups[name]; !ok && name != "" {
			groups[name] = &Group{Name: name}
		}
	}
	for _, l := range f.Links {
		need(l.DestGroup)
	}
	for _, s := range f.Segments {
		for _, e := range slices.Concat(s.Edges, s.Pending) {
			need(e[0])
			need(e[1])
		}
	}
	out := Fabric{}
	for _, g := range groups {
		slices.SortFunc(g.Nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
		out.Groups = append(out.Groups, *g)
	}
	slices.SortFunc(out.Groups, func(a, b Group) int { return cmp.Compare(a.Name, b.Name) })
	out.Links = slices.Clone(f.Links)
	slices.SortFunc(out.Links, func(a, b Link) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.DestGroup, b.DestGroup),
			cmp.Compare(a.DestNode, b.DestNode), cmp.Compare(a.ID, b.ID))
	})
	for _, s := range f.Segments {
		out.Segments = append(out.Segments, Segment{Name: s.Name, Edges: sortedPairs(s.Edges), Pending: sortedPairs(s.Pending)})
	}
	slices.SortFunc(out.Segments, func(a, b Segment) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func sortedPairs(pairs [][2]string) [][2]string {
	out := slices.Clone(pairs)
	slices.SortFunc(out, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return out
}

// gateways are the nodes holding a live link: the source of one, or the node that
// claimed one.
func (f Fabric) gateways() map[string]bool {
	out := map[string]bool{}
	for _, l := range f.Links {
		if l.Status == "deleted" {
			continue
		}
		out[l.Source] = true
		if l.DestNode != "" {
			out[l.DestNode] = true
		}
	}
	return out
}

// shortName is a node's id without its group, as drawn inside the group's box.
func shortName(id, group string) string {
	return strings.TrimPrefix(id, group+"/")
}
