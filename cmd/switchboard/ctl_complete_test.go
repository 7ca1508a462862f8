package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// complete asks the CLI for completions as a shell does (cobra's __complete).
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	out, errOut, code := run(t, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errOut)
	}
	var values []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.HasPrefix(line, ":") {
			values = append(values, line)
		}
	}
	return values
}

// TestCtlCompletesNodesAndSegments: node ids and segment names complete from the
// control plane the command would talk to.
func TestCtlCompletesNodesAndSegments(t *testing.T) {
	nb, sb, stop := startControlPlane(t, "database:\n  type: in_memory\n")
	defer func() { _ = stop() }()
	f := cpharness.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, nb, "segment", "add", "tenants")
	mustCtl(t, nb, "segment", "add", "transit")

	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"ctl", "--server", nb, "segment", "remove", "t"}, []string{"tenants", "transit"}},
		{[]string{"ctl", "--server", nb, "segment", "remove", "te"}, []string{"tenants"}},
		{[]string{"ctl", "--server", nb, "link", "add", "--segment", ""}, []string{"tenants", "transit"}},
		{[]string{"ctl", "--server", nb, "connection", "list", ""}, []string{"cloud/n1", "edge/n1"}},
		{[]string{"ctl", "--server", nb, "route", "list", "--node", "e"}, []string{"edge/n1"}},
		{[]string{"ctl", "--server", nb, "link", "list", "--source", ""}, []string{"cloud/n1", "edge/n1"}},
		// Only the first argument is a node.
		{[]string{"ctl", "--server", nb, "connection", "list", "edge/n1", ""}, nil},
		// A control plane that does not answer completes nothing, without an error.
		{[]string{"ctl", "--server", "127.0.0.1:1", "--timeout", "2s", "segment", "remove", ""}, nil},
	}
	for _, c := range cases {
		got := complete(t, c.args...)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("complete %v = %v, want %v", c.args[3:], got, c.want)
		}
	}
}
