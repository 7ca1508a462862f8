package render

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// renderOnce renders tmpl over eps into a temporary file and returns the file.
func renderOnce(t *testing.T, tmpl string, eps []endpoint.Endpoint) string {
	t.Helper()
	dir := t.TempDir()
	src, out := filepath.Join(dir, "t.tmpl"), filepath.Join(dir, "out")
	if err := os.WriteFile(src, []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := NewOutput(Spec{Template: src, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Update(context.Background(), eps); err != nil {
		t.Fatalf("Update: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNoFormatLeaksARefusedValue: fmt verbs that bypass a value's Format method (%p,
// %w outside an error) and the stand-ins' exported MarshalJSON methods print no
// control character of a refused value into the file.
func TestNoFormatLeaksARefusedValue(t *testing.T) {
	evil := ep("prod", "web", "http", "10.0.0.2", 8080)
	evil.Node = "n2\u0085X"
	evil.Annotations = map[string]string{"team": "x;\n}\nserver { listen 80; }"}
	for _, tmpl := range []string{
		`{{ range registrations "prod" "http" "web" "" }}{{ printf "%p" (index .Annotations "team") }}{{ end }}`,
		`{{ range registrations "prod" "http" "web" "" }}{{ printf "%w" .Node }}{{ end }}`,
		`{{ range registrations "prod" "http" "web" "" }}{{ printf "%p" . }}{{ end }}`,
		`{{ range registrations "prod" "http" "web" "" }}{{ printf "%s" .MarshalJSON }}{{ end }}`,
		`{{ range registrations "prod" "http" "web" "" }}{{ printf "%s" .Node.MarshalJSON }}{{ end }}`,
	} {
		got := renderOnce(t, tmpl, []endpoint.Endpoint{evil})
		// Without a raw line break the injected block cannot open a line of its own.
		if strings.ContainsAny(got, "\n\u0085") {
			t.Errorf("%s rendered %q: a refused value's control characters reached the file", tmpl, got)
		}
	}
}

// TestLineSeparatorsAreControl: U+2028 and U+2029 end a line for YAML (libyaml and its
// ports) and JavaScript, so our writes refuse them and the renderer treats a value
// holding one as it treats a newline.
func TestLineSeparatorsAreControl(t *testing.T) {
	for _, v := range []string{"web\u2028  admin: true", "web\u2029x"} {
		if !endpoint.HasControl(v) {
			t.Errorf("HasControl(%q) = false", v)
		}
		e := ep("prod", "web", "http", "10.0.0.2", 8080)
		e.Annotations = map[string]string{"team": v}
		if err := e.Validate(); err == nil {
			t.Errorf("Validate accepted annotation %q", v)
		}
		got := renderOnce(t, `{{ range registrations "prod" "http" "web" "" }}team: {{ index .Annotations "team" }}{{ end }}`, []endpoint.Endpoint{e})
		if strings.ContainsAny(got, "\u2028\u2029") {
			t.Errorf("rendered %q", got)
		}
	}
}
