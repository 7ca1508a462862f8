package render

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOutputPath: Path names the rendered file, not the template.
func TestOutputPath(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "in.tmpl")
	if err := os.WriteFile(tmpl, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := NewOutput(Spec{Template: tmpl, Out: filepath.Join(dir, "out.conf")})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Path(); got != filepath.Join(dir, "out.conf") {
		t.Fatalf("Path() = %q", got)
	}
}
