package topograph

import (
	"fmt"
	"strings"
)

func writeDOT(b *strings.Builder, f Fabric) {
	gw := f.gateways()
	b.WriteString("digraph fabric {\n")
	b.WriteString("  graph [rankdir=LR, fontname=\"Helvetica\", label=\"switchboard fabric\", labelloc=t];\n")
	b.WriteString("  node [fontname=\"Helvetica\", shape=box, style=rounded];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=10];\n")
	for _, g := range f.Groups {
		fmt.Fprintf(b, "  subgraph %s {\n", quoteDOT("cluster_"+g.Name))
		fmt.Fprintf(b, "    label=%s;\n", quoteDOT("group "+g.Name))
		fmt.Fprintf(b, "    %s [label=%s, shape=folder];\n", quoteDOT(groupID(g.Name)), quoteDOT(g.Name))
		for _, n := range g.Nodes {
			label, style := shortName(n.ID, g.Name), "rounded"
			if gw[n.ID] {
				label += "\ngateway"
				style += ",bold"
			}
			if !n.Connected {
				label += "\ndisconnected"
				style += ",dashed"
			}
			fmt.Fprintf(b, "    %s [label=%s, style=%s];\n", quoteDOT(n.ID), quoteDOT(label), quoteDOT(style))
		}
		b.WriteString("  }\n")
	}
	for _, s := range f.Segments {
		for _, e := range s.Edges {
			fmt.Fprintf(b, "  %s -> %s [dir=none, style=dotted, color=%s, label=%s];\n",
				quoteDOT(groupID(e[0])), quoteDOT(groupID(e[1])), quoteDOT(segmentColor), quoteDOT("segment "+s.Name))
		}
		for _, e := range s.Pending {
			fmt.Fprintf(b, "  %s -> %s [dir=none, style=dashed, color=%s, fontcolor=%s, label=%s];\n",
				quoteDOT(groupID(e[0])), quoteDOT(groupID(e[1])), quoteDOT(pendingColor), quoteDOT(pendingColor),
				quoteDOT("segment "+s.Name+"\n"+PendingLabel))
		}
	}
	for _, l := range f.Links {
		dest := l.DestNode
		if dest == "" {
			dest = groupID(l.DestGroup) // not claimed yet: it points at the group
		}
		st := styleOf(l.Status)
		fmt.Fprintf(b, "  %s -> %s [label=%s, color=%s, fontcolor=%s, style=%s];\n",
			quoteDOT(l.Source), quoteDOT(dest), quoteDOT(l.Status), quoteDOT(st.color), quoteDOT(st.color), st.dot)
	}
	b.WriteString("}\n")
}

// groupID is the DOT node standing for a group (its folder); node ids hold a "/",
// so a group's id never collides with a node's.
func groupID(group string) string { return "group:" + group }

// quoteDOT makes s a DOT quoted string; "\n" in s becomes a line break.
func quoteDOT(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
