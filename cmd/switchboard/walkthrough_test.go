package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestREADMEAgentWalkthrough runs the README's agent step against dev: the example
// manifest's check passes against what dev serves, so the entry is published, the
// template and the Prometheus targets show it, and it is gone when the agent stops.
func TestREADMEAgentWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const manifestPath = "examples/dev-agent.yaml"
	if !strings.Contains(string(readme), "agent --manifest "+manifestPath) {
		t.Fatalf("the README's agent step no longer runs %s: update this test", manifestPath)
	}
	manifest, err := os.ReadFile(filepath.Join("../..", manifestPath))
	if err != nil {
		t.Fatal(err)
	}
	// The manifest checks dev's registrar health address as dev's flag defaults it.
	devHealth := newRootCmd(nil, nil)
	devCmd, _, _ := devHealth.Find([]string{"dev"})
	def := devCmd.Flag("registrar-health-listen").DefValue
	if !strings.Contains(string(manifest), "http://"+def+"/healthz") {
		t.Fatalf("%s does not check dev's registrar health at %s", manifestPath, def)
	}

	out, stop := startDev(t)
	natsURL := fieldAfter(waitFor(t, out, "NATS JetStream"), "NATS JetStream")
	reg := waitFor(t, out, "  Registrar ")
	regAddr := fieldAfter(reg, "  Registrar ")
	health := strings.TrimPrefix(strings.TrimSuffix(fieldAfter(reg, "health and metrics"), ")"), "http://")
	dir := t.TempDir()
	// The same manifest, pointed at this test's dev (its ports are not the defaults).
	local := writeFile(t, dir, "agent.yaml", strings.ReplaceAll(string(manifest), def, health))
	upstream, targets := filepath.Join(dir, "upstream.conf"), filepath.Join(dir, "targets.json")
	_, stopAgent := startAgent(t, "--manifest", local, "--registry-backend", "registrar", "--registrar-address", regAddr,
		"--render", "../../examples/upstream.tmpl:"+upstream, "--prometheus-sd", targets)

	waitFile(t, upstream, func(s string) bool { return strings.Contains(s, "server 10.0.0.2:8080 weight=1;") })
	waitFile(t, targets, func(s string) bool { return strings.Contains(s, `"10.0.0.2:8080"`) })
	lookupHas := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, _, code := run(t, "registry", "lookup", "--service", "web", "--nats-url", natsURL)
			if code == 0 && strings.Contains(got, "10.0.0.2") == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("registry lookup --service web (want the entry: %v):\n%s", want, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	lookupHas(true)
	if err := stopAgent(); err != nil {
		t.Fatalf("agent: %v", err)
	}
	lookupHas(false) // the agent removes what it registered when it stops
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
