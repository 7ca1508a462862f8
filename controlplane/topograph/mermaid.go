package topograph

import (
	"fmt"
	"strings"
)

// writeMermaid draws a flowchart. Mermaid ids cannot hold "/", so every group and
// node gets a short generated id (g0, g0n1, ...) in sorted order, and its name is the
// label.
func writeMermaid(b *strings.Builder, f Fabric) {
	gw := f.gateways()
	ids := map[string]string{}
	b.WriteString("flowchart LR\n")
	for gi, g := range f.Groups {
		gid := fmt.Sprintf("g%d", gi)
		ids[groupID(g.Name)] = gid
		fmt.Fprintf(b, "  subgraph %s_box[%s]\n", gid, quoteMermaid("group "+g.Name))
		fmt.Fprintf(b, "    %s[[%s]]\n", gid, quoteMermaid(g.Name))
		for ni, n := range g.Nodes {
			nid := fmt.Sprintf("%sn%d", gid, ni)
			ids[n.ID] = nid
			label := shortName(n.ID, g.Name)
			if gw[n.ID] {
				label += " (gateway)"
			}
			if !n.Connected {
				label += " (disconnected)"
			}
			fmt.Fprintf(b, "    %s(%s)\n", nid, quoteMermaid(label))
		}
		b.WriteString("  end\n")
	}
	edge := 0
	var styles []string
	for _, s := range f.Segments {
		for _, e := range s.Edges {
			fmt.Fprintf(b, "  %s -.-|%s| %s\n", ids[groupID(e[0])], quoteMermaid("segment "+s.Name), ids[groupID(e[1])])
			styles = append(styles, fmt.Sprintf("  linkStyle %d stroke:%s", edge, segmentColor))
			edge++
		}
		for _, e := range s.Pending {
			label := "segment " + s.Name + " (" + PendingLabel + ")"
			fmt.Fprintf(b, "  %s -.-|%s| %s\n", ids[groupID(e[0])], quoteMermaid(label), ids[groupID(e[1])])
			// Mermaid draws every -.- line dotted alike: the dash pattern sets these apart.
			styles = append(styles, fmt.Sprintf("  linkStyle %d stroke:%s,stroke-dasharray:6 4,color:%s", edge, pendingColor, pendingColor))
			edge++
		}
	}
	for _, l := range f.Links {
		src, ok := ids[l.Source]
		if !ok {
			// A link from a node no group lists (it left meanwhile): draw it anyway.
			src = fmt.Sprintf("x%d", edge)
			fmt.Fprintf(b, "  %s(%s)\n", src, quoteMermaid(l.Source))
		}
		dest := ids[l.DestNode]
		if dest == "" {
			dest = ids[groupID(l.DestGroup)]
		}
		st := styleOf(l.Status)
		fmt.Fprintf(b, "  %s %s|%s| %s\n", src, st.arrow, quoteMermaid(l.Status), dest)
		styles = append(styles, fmt.Sprintf("  linkStyle %d stroke:%s,color:%s", edge, st.color, st.color))
		edge++
	}
	for _, s := range styles {
		b.WriteString(s + "\n")
	}
}

// quoteMermaid makes s a Mermaid quoted label: a double quote would end it, so it
// becomes the entity Mermaid understands, and a line break would end the statement,
// so it becomes a space.
func quoteMermaid(s string) string {
	return `"` + strings.NewReplacer(`"`, "#quot;", "\n", " ", "\r", " ").Replace(s) + `"`
}
