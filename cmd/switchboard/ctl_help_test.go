package main

import (
	"strings"
	"testing"
)

// TestCtlTopologyHelpNamesItsDefault: topology's --output is a drawing, dot unless
// given, and its help says so rather than ctl's table.
func TestCtlTopologyHelpNamesItsDefault(t *testing.T) {
	r := runBinary(t, "", nil, "ctl", "topology", "--help")
	if r.code != 0 {
		t.Fatalf("ctl topology --help: exit %d: %s", r.code, r.stderr)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, "--output") {
			if !strings.Contains(line, `(default "dot")`) || !strings.Contains(line, "mermaid") {
				t.Errorf("topology's --output help: %q, want dot or mermaid, default dot", line)
			}
			return
		}
	}
	t.Errorf("ctl topology --help has no --output line:\n%s", r.stdout)
}
