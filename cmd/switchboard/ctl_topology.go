package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/topograph"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

func ctlTopologyCmd(a *app, o *ctlOptions) *cobra.Command {
	var (
		all    bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Draw the fabric: groups, gateways, links by state, segments (-o dot or mermaid)",
		Long: `Draw the fabric as the control plane sees it: each group with its nodes (gateways
and disconnected nodes marked), every link between nodes styled by its state
(applied, pending, connecting, failed; deleted with --all), and the group pairs each
segment connects — dashed and marked "no nodes yet" while a group of the pair has
no node. -o dot (the default) is Graphviz; -o mermaid a Mermaid flowchart.`,
		Example: "  switchboard ctl topology | dot -Tsvg > fabric.svg\n  switchboard ctl topology -o mermaid > fabric.mmd",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := topograph.ParseFormat(output)
			if err != nil {
				return usageError{err}
			}
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				f, err := fetchFabric(ctx, c, all)
				if err != nil {
					return err
				}
				return topograph.Write(a.out, format, f)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "draw deleted links too")
	// Its own --output, which shadows ctl's: a drawing, not table, json or yaml.
	cmd.Flags().StringVarP(&output, "output", "o", string(topograph.DOT), "drawing format: dot (Graphviz) or mermaid")
	return cmd
}

// fetchFabric reads groups, links and segments from the API.
func fetchFabric(ctx context.Context, c controlplanev1.ControlPlaneServiceClient, all bool) (topograph.Fabric, error) {
	var f topograph.Fabric
	groups, err := c.ListGroups(ctx, &controlplanev1.ListGroupsRequest{})
	if err != nil {
		return f, err
	}
	for _, g := range groups.GetGroups() {
		tg := topograph.Group{Name: g.GetName()}
		for _, n := range g.GetNodes() {
			tg.Nodes = append(tg.Nodes, topograph.Node{ID: n.GetId(), Connected: n.GetConnected()})
		}
		f.Groups = append(f.Groups, tg)
	}
	statuses := []string{"pending", "connecting", "applied", "failed"}
	if all {
		statuses = nil
	}
	links, err := c.ListLinks(ctx, &controlplanev1.ListLinksRequest{Statuses: statuses})
	if err != nil {
		return f, err
	}
	for _, l := range links.GetLinks() {
		f.Links = append(f.Links, topograph.Link{ID: l.GetLinkId(), Source: l.GetSourceNodeId(),
			DestGroup: l.GetDestGroup(), DestNode: l.GetDestNodeId(), Status: l.GetStatus()})
	}
	f.Segments, err = fetchSegments(ctx, c)
	return f, err
}

// fetchSegments reads the segments resolved over the registered groups, and the
// stored ones for the links among them that wait for a group's first node: the
// resolved set alone leaves those out, so a link just added toward a new group
// would not be drawn at all. In config mode the API serves the resolved segments
// only, and nothing is pending.
func fetchSegments(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) ([]topograph.Segment, error) {
	resolved, err := c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{Resolved: true})
	if err != nil {
		return nil, err
	}
	segs := resolvedSegments(resolved.GetSegments())
	var pending []controlplane.Segment
	if !resolved.GetConfigMode() {
		stored, err := c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
		if err != nil {
			return nil, err
		}
		pending = controlplane.Pending(controlplane.SegmentRules(storedSegments(stored.GetSegments())), segs)
	}
	return drawnSegments(segs, pending), nil
}

func storedSegments(segs []*controlplanev1.Segment) []store.Segment {
	out := make([]store.Segment, 0, len(segs))
	for _, s := range segs {
		seg := store.Segment{Name: s.GetName()}
		for _, l := range s.GetLinks() {
			seg.Links = append(seg.Links, store.NewSegmentLink(s.GetName(), l.GetGroupA(), l.GetGroupB()))
		}
		out = append(out, seg)
	}
	return out
}

func resolvedSegments(segs []*controlplanev1.Segment) []controlplane.Segment {
	out := make([]controlplane.Segment, 0, len(segs))
	for _, s := range segs {
		seg := controlplane.Segment{Name: s.GetName()}
		for _, l := range s.GetLinks() {
			seg.Edges = append(seg.Edges, [2]string{l.GetGroupA(), l.GetGroupB()})
		}
		out = append(out, seg)
	}
	return out
}

// drawnSegments are the resolved segments with their pending pairs; a segment whose
// pairs all wait (a template's, say) is drawn with those alone.
func drawnSegments(resolved, pending []controlplane.Segment) []topograph.Segment {
	out := make([]topograph.Segment, 0, len(resolved)+len(pending))
	index := map[string]int{}
	for _, s := range resolved {
		index[s.Name] = len(out)
		out = append(out, topograph.Segment{Name: s.Name, Edges: s.Edges})
	}
	for _, p := range pending {
		i, ok := index[p.Name]
		if !ok {
			i = len(out)
			out = append(out, topograph.Segment{Name: p.Name})
		}
		out[i].Pending = p.Edges
	}
	return out
}
