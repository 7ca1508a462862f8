package topograph

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// small is a fabric with every kind of thing drawn: a gateway, a disconnected node,
// a group known only from a segment, and a link in each state (one unclaimed).
func small() Fabric {
	return Fabric{
		Groups: []Group{
			{Name: "edge", Nodes: []Node{{ID: "edge/e2", Connected: true}, {ID: "edge/e1", Connected: true}}},
			{Name: "cloud", Nodes: []Node{{ID: "cloud/c1", Connected: true}, {ID: "cloud/c2"}}},
		},
		Links: []Link{
			{ID: "l2", Source: "edge/e2", DestGroup: "lab", Status: "pending"},
			{ID: "l1", Source: "edge/e1", DestGroup: "cloud", DestNode: "cloud/c1", Status: "applied"},
			{ID: "l3", Source: "edge/e1", DestGroup: "cloud", DestNode: "cloud/c2", Status: "failed"},
			{ID: "l4", Source: "edge/e2", DestGroup: "cloud", DestNode: "cloud/c2", Status: "deleted"},
		},
		Segments: []Segment{
			{Name: "tenants", Edges: [][2]string{{"edge", "lab"}}},
			{Name: "main", Edges: [][2]string{{"cloud", "edge"}}},
		},
	}
}

// waiting is small with segment links that wait for nodes: one to a group no node
// or link names (it gets a box of its own), one to a group a link already names.
func waiting() Fabric {
	f := small()
	f.Segments[0].Pending = [][2]string{{"lab", "partner"}}                     // tenants
	f.Segments[1].Pending = [][2]string{{"cloud", "partner"}, {"cloud", "lab"}} // main
	return f
}

// fabrics are the fabrics with golden drawings in testdata, by file name.
var fabrics = map[string]func() Fabric{"small": small, "waiting": waiting}

func render(t *testing.T, format Format, f Fabric) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, format, f); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGolden: each format's drawing of each fabric is exactly the file in testdata
// (go test -update rewrites them after a deliberate change).
func TestGolden(t *testing.T) {
	for name, fabric := range fabrics {
		for _, format := range []Format{DOT, Mermaid} {
			t.Run(name+"."+string(format), func(t *testing.T) { golden(t, name, format, fabric()) })
		}
	}
}

// golden compares the drawing of f with testdata/NAME.FORMAT.
func golden(t *testing.T, name string, format Format, f Fabric) {
	t.Helper()
	got := render(t, format, f)
	path := filepath.Join("testdata", name+"."+string(format))
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("%s drawing differs from %s:\n%s", format, path, got)
	}
}

// TestDeterministic: the input's order does not change the drawing.
func TestDeterministic(t *testing.T) {
	a := waiting()
	b := waiting()
	slices.Reverse(b.Segments[1].Pending)
	for i, j := 0, len(b.Links)-1; i < j; i, j = i+1, j-1 {
		b.Links[i], b.Links[j] = b.Links[j], b.Links[i]
	}
	b.Groups[0], b.Groups[1] = b.Groups[1], b.Groups[0]
	b.Segments[0], b.Segments[1] = b.Segments[1], b.Segments[0]
	for _, format := range []Format{DOT, Mermaid} {
		if render(t, format, a) != render(t, format, b) {
			t.Errorf("%s: the order of the input changed the drawing", format)
		}
	}
}

// TestDOTParses runs Graphviz on each drawing when `dot` is installed, and otherwise
// checks the structure: balanced braces, one statement per line, every edge between
// declared or quoted ids.
func TestDOTParses(t *testing.T) {
	wants := map[string][]string{
		"small":   {"group edge", "gateway", "applied", "segment main"},
		"waiting": {"group partner", "no nodes yet"},
	}
	for name, fabric := range fabrics {
		t.Run(name, func(t *testing.T) { dotParses(t, render(t, DOT, fabric()), wants[name]) })
	}
}

func dotParses(t *testing.T, out string, wants []string) {
	t.Helper()
	if dot, err := exec.LookPath("dot"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, dot, "-Tsvg")
		cmd.Stdin = strings.NewReader(out)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		svg, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("dot -Tsvg: %v, %s", err, stderr.String())
		}
		for _, want := range wants {
			if !bytes.Contains(svg, []byte(want)) {
				t.Errorf("the SVG dot drew lacks %q", want)
			}
		}
		return
	}
	t.Log("graphviz dot not installed: checking the DOT structure only")
	if strings.Count(out, "{") != strings.Count(out, "}") || !strings.HasPrefix(out, "digraph fabric {") {
		t.Fatalf("unbalanced or misnamed graph:\n%s", out)
	}
	if strings.Count(out, `"`)%2 != 0 {
		t.Fatalf("unbalanced quotes:\n%s", out)
	}
}

// TestStructure: what the picture says — gateways, disconnected nodes, unclaimed
// links pointing at their group, each state's style, segments between groups.
func TestStructure(t *testing.T) {
	dot := render(t, DOT, small())
	for _, want := range []string{
		`"cloud/c1" [label="c1\ngateway", style="rounded,bold"]`,
		`"cloud/c2" [label="c2\ngateway\ndisconnected", style="rounded,bold,dashed"]`,
		`"edge/e2" -> "group:lab" [label="pending"`,
		`"edge/e1" -> "cloud/c1" [label="applied", color="#15803d"`,
		`"group:cloud" -> "group:edge" [dir=none, style=dotted, color="#6b7280", label="segment main"]`,
		`subgraph "cluster_lab"`,
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("DOT lacks %s", want)
		}
	}
	mm := render(t, Mermaid, small())
	for _, want := range []string{"flowchart LR", `g0n0("c1 (gateway)")`, `g1n0 -->|"applied"| g0n0`, `g1n1 -.->|"pending"| g2`, `g0 -.-|"segment main"| g1`, "linkStyle 2 stroke:#15803d"} {
		if !strings.Contains(mm, want) {
			t.Errorf("Mermaid lacks %s:\n%s", want, mm)
		}
	}
	if _, err := ParseFormat("png"); err == nil || !strings.Contains(err.Error(), "png") {
		t.Errorf("ParseFormat(png): %v", err)
	}
}

// TestPendingPairs: a segment pair that waits for nodes is a dashed amber line
// between the groups, labelled with the segment and "no nodes yet"; a group only such
// a pair names gets its box.
func TestPendingPairs(t *testing.T) {
	dot := render(t, DOT, waiting())
	for _, want := range []string{
		`"group:cloud" -> "group:partner" [dir=none, style=dashed, color="#b45309", fontcolor="#b45309", label="segment main\nno nodes yet"]`,
		`"group:lab" -> "group:partner" [dir=none, style=dashed, color="#b45309", fontcolor="#b45309", label="segment tenants\nno nodes yet"]`,
		`subgraph "cluster_partner"`,
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("DOT lacks %s:\n%s", want, dot)
		}
	}
	mm := render(t, Mermaid, waiting())
	for _, want := range []string{`subgraph g3_box["group partner"]`, `g0 -.-|"segment main (no nodes yet)"| g2`,
		`g2 -.-|"segment tenants (no nodes yet)"| g3`, "linkStyle 1 stroke:#b45309,stroke-dasharray:6 4,color:#b45309"} {
		if !strings.Contains(mm, want) {
			t.Errorf("Mermaid lacks %s:\n%s", want, mm)
		}
	}
	if plain := render(t, DOT, small()); strings.Contains(plain, PendingLabel) {
		t.Errorf("a fabric without pending pairs says %q:\n%s", PendingLabel, plain)
	}
}

// TestQuoting: names with quotes and backslashes cannot break out of a label.
func TestQuoting(t *testing.T) {
	f := Fabric{Groups: []Group{{Name: `we"ird\g`, Nodes: []Node{{ID: `we"ird\g/n"1`, Connected: true}}}}}
	dot := render(t, DOT, f)
	if !strings.Contains(dot, `"we\"ird\\g/n\"1"`) {
		t.Errorf("DOT quoting:\n%s", dot)
	}
	if mm := render(t, Mermaid, f); strings.Count(mm, `"`)%2 != 0 || !strings.Contains(mm, "#quot;") {
		t.Errorf("Mermaid quoting:\n%s", mm)
	}
}
