package topograph

import (
	"strings"
	"testing"
)

// FuzzWrite: whatever the names (they come from nodes and operators, and a pending
// pair's groups from operators alone), every DOT string stays one string — an even
// count of unescaped quotes on each line — and every Mermaid label keeps its quotes
// to itself.
func FuzzWrite(f *testing.F) {
	f.Add("cloud", "n1", "segment", "applied")
	f.Add(`we"ird\`, "n\"1\n", "s\\\"", "x\ny")
	f.Fuzz(func(t *testing.T, group, node, segment, status string) {
		fab := Fabric{
			Groups:   []Group{{Name: group, Nodes: []Node{{ID: group + "/" + node, Connected: true}}}},
			Links:    []Link{{ID: "l", Source: group + "/" + node, DestGroup: "other", Status: status}},
			Segments: []Segment{{Name: segment, Edges: [][2]string{{group, "other"}}, Pending: [][2]string{{group, node}}}},
		}
		var dot, mm strings.Builder
		if err := Write(&dot, DOT, fab); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(dot.String(), "\n") {
			if n := unescapedQuotes(line); n%2 != 0 {
				t.Fatalf("DOT line with %d unescaped quotes: %q", n, line)
			}
		}
		if err := Write(&mm, Mermaid, fab); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(mm.String(), "\n") {
			if strings.Count(line, `"`)%2 != 0 {
				t.Fatalf("Mermaid line with an odd count of quotes: %q", line)
			}
		}
	})
}

// unescapedQuotes counts the quotes not preceded by an odd run of backslashes.
func unescapedQuotes(s string) int {
	n, slashes := 0, 0
	for _, r := range s {
		switch r {
		case '\\':
			slashes++
			continue
		case '"':
			if slashes%2 == 0 {
				n++
			}
		}
		slashes = 0
	}
	return n
}
