package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// backendPair returns the registry the agent reads and one that "another node"
// writes through; for an in-process backend they may be the same.
type backendPair func(t *testing.T) (agentSide, elsewhere registry.Registry)

func TestDiscoveryMemory(t *testing.T) {
	testDiscovery(t, func(t *testing.T) (registry.Registry, registry.Registry) {
		r := newMemory(t)
		return r, r
	})
}

func TestDiscoveryPolling(t *testing.T) {
	testDiscovery(t, func(t *testing.T) (registry.Registry, registry.Registry) {
		r := newMemory(t)
		return listOnly{r}, r
	})
}

// listOnly hides a backend's change feed, so Discovery polls.
type listOnly struct{ registry.Registry }

const upstreamTmpl = `upstream web {
{{- range registrations "prod" "http" "web" "*"}}
  server {{hostport .Address .Port}};
{{- end}}
}
`

func testDiscovery(t *testing.T, backends backendPair) {
	t.Run("outputs follow changes made elsewhere", func(t *testing.T) {
		agentSide, elsewhere := backends(t)
		d := newDiscoveryFixture(t, agentSide, elsewhere)
		d.apply(registry.Register(ep("web", "10.0.0.1", 80, 0)), registry.Register(prom("10.0.0.2", 9100)))
		d.start()
		d.waitFile(d.out, "server 10.0.0.1:80;")
		d.waitTargets("10.0.0.2:9100")

		d.apply(registry.Register(ep("web", "10.0.0.3", 80, 0)), registry.Register(prom("2001:db8::2", 9100)))
		d.waitFile(d.out, "  server 10.0.0.1:80;\n  server 10.0.0.3:80;\n")
		d.waitTargets("10.0.0.2:9100", "[2001:db8::2]:9100")

		d.apply(registry.Unregister(ep("web", "10.0.0.1", 80, 0)), registry.Unregister(prom("10.0.0.2", 9100)))
		d.waitFile(d.out, "upstream web {\n  server 10.0.0.3:80;\n}\n")
		d.waitTargets("[2001:db8::2]:9100")
	})

	t.Run("a broken template never overwrites good output", func(t *testing.T) {
		agentSide, elsewhere := backends(t)
		d := newDiscoveryFixture(t, agentSide, elsewhere)
		d.apply(registry.Register(ep("web", "10.0.0.1", 80, 0)))
		d.start()
		d.waitFile(d.out, "server 10.0.0.1:80;")
		good, _ := os.ReadFile(d.out)

		errorsBefore := d.logs.count("output not updated")
		if err := os.WriteFile(d.tmpl, []byte("{{range registrations}}\n{{end"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.apply(registry.Register(ep("web", "10.0.0.5", 80, 0)), registry.Register(prom("10.0.0.6", 9100)))
		// The change still reaches file_sd, so the render round ran...
		d.waitTargets("10.0.0.6:9100")
		eventually(t, "template error logged", func() bool { return d.logs.count("output not updated") > errorsBefore })
		if !strings.Contains(d.logs.String(), d.tmpl+":2") {
			t.Errorf("the error does not name the template and line:\n%s", d.logs.String())
		}
		// ...but the rendered file kept its last good content.
		if now, _ := os.ReadFile(d.out); string(now) != string(good) {
			t.Fatalf("broken template overwrote the output with %q", now)
		}

		if err := os.WriteFile(d.tmpl, []byte(upstreamTmpl), 0o600); err != nil {
			t.Fatal(err)
		}
		d.disc.Trigger()
		d.waitFile(d.out, "server 10.0.0.5:80;")
	})
}

func prom(addr string, port int) endpoint.Endpoint {
	e := ep("node", addr, port, 0)
	e.Protocol = "prometheus"
	return e
}

type discoveryFixture struct {
	t             *testing.T
	elsewhere     registry.Registry
	disc          *Discovery
	tmpl, out, sd string
	logs          *logBuffer
}

func newDiscoveryFixture(t *testing.T, agentSide, elsewhere registry.Registry) *discoveryFixture {
	dir := t.TempDir()
	d := &discoveryFixture{t: t, elsewhere: elsewhere, logs: &logBuffer{},
		tmpl: filepath.Join(dir, "upstream.tmpl"), out: filepath.Join(dir, "upstream.conf"), sd: filepath.Join(dir, "targets.json")}
	if err := os.WriteFile(d.tmpl, []byte(upstreamTmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := render.NewOutput(render.Spec{Template: d.tmpl, Out: d.out})
	if err != nil {
		t.Fatal(err)
	}
	d.disc = NewDiscovery(agentSide, []Output{ro, &filesd.Output{Path: d.sd}},
		DiscoveryOptions{Debounce: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, RetryInterval: time.Hour, Logger: newLogger(d.logs)})
	return d
}

func (d *discoveryFixture) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.disc.Run(ctx) }()
	d.t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.disc.Ready():
	case <-time.After(wait):
		d.t.Fatal("discovery never became ready")
	}
}

func (d *discoveryFixture) apply(ops ...registry.Op) {
	d.t.Helper()
	if err := d.elsewhere.Apply(context.Background(), ops); err != nil {
		d.t.Fatal(err)
	}
}

// waitFile waits until path contains want.
func (d *discoveryFixture) waitFile(path, want string) {
	d.t.Helper()
	var got []byte
	eventually(d.t, "file "+filepath.Base(path)+" contains "+want, func() bool {
		got, _ = os.ReadFile(path)
		return strings.Contains(string(got), want)
	})
}

// waitTargets waits until the file_sd file lists exactly targets, and checks it
// against Prometheus's file SD rules every time it reads it.
func (d *discoveryFixture) waitTargets(targets ...string) {
	d.t.Helper()
	var got []string
	eventually(d.t, "file_sd targets "+strings.Join(targets, " "), func() bool {
		data, err := os.ReadFile(d.sd)
		if err != nil {
			return false
		}
		got = validateFileSD(d.t, data)
		return slices.Equal(got, targets)
	})
}
