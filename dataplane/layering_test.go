package dataplane_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDataPlaneDoesNotImportTheControlPlane: the data plane talks to the control
// plane over its gRPC API only. Its packages (tests aside: their harness runs a
// control plane) import no package of controlplane/, so the layering holds as code
// moves.
func TestDataPlaneDoesNotImportTheControlPlane(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, which lists the packages: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	const cp = "github.com/switchboard-mesh/switchboard/controlplane"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == cp || strings.HasPrefix(pkg, cp+"/") {
			t.Errorf("the data plane depends on %s", pkg)
		}
	}
}
