package main

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// TestCtlTopologyDrawsLinksWaitingForNodes: a segment link to a group that has no
// node yet is drawn, dashed and labelled "no nodes yet", in DOT and in Mermaid —
// and once a node of that group registers it is drawn as a segment like any other.
func TestCtlTopologyDrawsLinksWaitingForNodes(t *testing.T) {
	nb, sb, stop := startControlPlane(t, "database:\n  type: in_memory\n")
	f := cpharness.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	mustCtl(t, nb, "link", "add", "cloud", "edge")
	mustCtl(t, nb, "link", "add", "cloud", "customer-a")
	eventuallyCtl(t, nb, []string{"applied"}, "link", "list")

	dot := mustCtl(t, nb, "topology")
	for _, want := range []string{
		`subgraph "cluster_customer-a"`,
		`"group:cloud" -> "group:customer-a" [dir=none, style=dashed, color="#b45309", fontcolor="#b45309", label="segment default\nno nodes yet"]`,
		`"group:cloud" -> "group:edge" [dir=none, style=dotted, color="#6b7280", label="segment default"]`,
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("topology lacks %s:\n%s", want, dot)
		}
	}
	mermaid := mustCtl(t, nb, "topology", "-o", "mermaid")
	for _, want := range []string{`["group customer-a"]`, `-.-|"segment default (no nodes yet)"|`, `-.-|"segment default"|`} {
		if !strings.Contains(mermaid, want) {
			t.Errorf("topology -o mermaid lacks %s:\n%s", want, mermaid)
		}
	}

	if _, err := f.Start(cpharness.NodeConfig{Group: "customer-a", ID: "n1", Target: sb}); err != nil {
		t.Fatal(err)
	}
	eventuallyCtl(t, nb, []string{"customer-a/n1"}, "group", "list")
	dot = mustCtl(t, nb, "topology")
	if strings.Contains(dot, "no nodes yet") ||
		!strings.Contains(dot, `"group:cloud" -> "group:customer-a" [dir=none, style=dotted, color="#6b7280", label="segment default"]`) {
		t.Errorf("once customer-a has a node its link is still drawn as waiting:\n%s", dot)
	}
	f.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
