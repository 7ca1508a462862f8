package main

import (
	"context"

	"github.com/spf13/cobra"

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
segment connects. -o dot (the default) is Graphviz; -o mermaid a Mermaid flowchart.`,
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

// fetchFabric reads groups, links and the resolved segments from the API.
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
	segs, err := c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{Resolved: true})
	if err != nil {
		return f, err
	}
	for _, s := range segs.GetSegments() {
		ts := topograph.Segment{Name: s.GetName()}
		for _, l := range s.GetLinks() {
			ts.Edges = append(ts.Edges, [2]string{l.GetGroupA(), l.GetGroupB()})
		}
		f.Segments = append(f.Segments, ts)
	}
	return f, nil
}
