package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// storedElsewhere is a registry as another writer left it, control characters
// included (our own writes refuse them): it lists eps and writes nothing.
type storedElsewhere struct{ eps []endpoint.Endpoint }

func (s storedElsewhere) Apply(context.Context, []registry.Op) error { return nil }
func (s storedElsewhere) Close() error                               { return nil }

func (s storedElsewhere) List(_ context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	var out []endpoint.Endpoint
	for _, e := range s.eps {
		if f.Match(e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// TestDiscoveryRefusesInjectedAnnotations: an annotation another writer stored with a
// newline never reaches a rendered file; the refusal is counted on every rendering
// and logged once.
func TestDiscoveryRefusesInjectedAnnotations(t *testing.T) {
	evil := ep("web", "10.0.0.2", 80, 0)
	evil.Annotations = map[string]string{"team": "edge;\n}\nserver {\n  proxy_pass http://evil.example;\n}"}
	good := ep("web", "10.0.0.1", 80, 0)
	good.Annotations = map[string]string{"team": "web"}
	src := storedElsewhere{[]endpoint.Endpoint{good, evil}}

	dir := t.TempDir()
	tmpl, out := filepath.Join(dir, "upstream.tmpl"), filepath.Join(dir, "upstream.conf")
	body := "{{range registrations \"prod\" \"http\" \"web\" \"\"}}server {{hostport .Address .Port}}; # {{.Annotations.team}}\n{{end}}"
	if err := os.WriteFile(tmpl, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := render.NewOutput(render.Spec{Template: tmpl, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	m := NewMetrics(prometheus.NewRegistry())
	d := NewDiscovery(src, []Output{ro}, DiscoveryOptions{Debounce: 10 * time.Millisecond, PollInterval: time.Hour,
		RetryInterval: time.Hour, Logger: newLogger(logs), Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	refused := m.refused.WithLabelValues(ro.Name())
	eventually(t, "a first rendering", func() bool { return testutil.ToFloat64(refused) == 1 })
	d.Trigger()
	eventually(t, "a second rendering", func() bool { return testutil.ToFloat64(refused) == 2 })

	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "server 10.0.0.1:80; # web\n" {
		t.Errorf("rendered %q; want only the clean endpoint", got)
	}
	const warning = "endpoint left out of a rendered file"
	if n := logs.count(warning); n != 1 {
		t.Errorf("logged %q %d times over two renderings, want once:\n%s", warning, n, logs)
	}
	for _, want := range []string{"level=WARN", "endpoint=prod/web/http/10.0.0.2:80", "field=annotations[team]", `value="edge;\n}\nserver {`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}
