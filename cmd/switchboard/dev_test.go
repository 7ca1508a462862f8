package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// startDev runs `switchboard dev` in the background on free ports and returns its
// output and a function that stops it (like SIGTERM) and waits for it to exit.
func startDev(t *testing.T, extra ...string) (*syncbuf.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncbuf.Buffer{}
	cmd := newRootCmd(out, out)
	cmd.SetArgs(append([]string{"dev", "--nats-listen", "127.0.0.1:0", "--registrar-listen", "127.0.0.1:0",
		"--registrar-health-listen", "127.0.0.1:0", "--controlplane-northbound", "127.0.0.1:0",
		"--controlplane-southbound", "127.0.0.1:0", "--controlplane-metrics-listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--log-level", "warn",
		// The data-plane fabric takes fixed ports; a test that wants it passes
		// --no-nodes=false with --nodes-base-port.
		"--no-nodes"}, extra...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("dev did not stop within 30s of being interrupted")
			return nil
		}
	}
	t.Cleanup(func() { cancel() })
	return out, stop
}

// waitFor polls the output for a line containing want.
func waitFor(t *testing.T, out *syncbuf.Buffer, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, want) {
				return line
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no line with %q in output:\n%s", want, out.String())
	return ""
}

// checkQuietShutdown fails the test if dev logged a warning or an error once it
// began to shut down: stopping in order (nodes, control plane, registrar, NATS)
// leaves nothing to complain about, but for one warning the data plane gives by
// design. The nodes stop one after another, and a node whose link peer has just
// left warns once when its first redial is refused (dataplane/node connectFailed:
// the first failure of a series is a warning), as it does for any peer that goes.
func checkQuietShutdown(t *testing.T, out *syncbuf.Buffer) {
	t.Helper()
	_, after, ok := strings.Cut(out.String(), "switchboard dev: shutting down")
	if !ok {
		t.Fatalf("no shutdown message:\n%s", out)
	}
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, `msg="link stream could not be opened"`) && strings.Contains(line, "connection refused") {
			continue
		}
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("logged while shutting down: %s", line)
		}
	}
}

func fieldAfter(line, label string) string {
	f := strings.Fields(strings.SplitN(line, label, 2)[1])
	return f[0]
}

func TestDevServesNATSAndStops(t *testing.T) {
	out, stop := startDev(t)
	url := fieldAfter(waitFor(t, out, "NATS JetStream"), "NATS JetStream")
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to dev NATS at %s: %v", url, err)
	}
	nc.Close()
	if err := stop(); err != nil {
		t.Fatalf("dev exited with %v", err)
	}
	checkQuietShutdown(t, out)
}

// TestRegistryCommandsAgainstDev is the README's walk-through: start dev, then drive
// the jetstream backend (the CLI default) with the registry commands.
func TestRegistryCommandsAgainstDev(t *testing.T) {
	out, stop := startDev(t)
	url := fieldAfter(waitFor(t, out, "NATS JetStream"), "NATS JetStream")
	flags := []string{"--nats-url", url}
	// A dry run names the change to dev's stream and makes none.
	plan, errOut, code := run(t, append([]string{"registry", "init", "--dry-run", "--replicas", "1", "--max-age", "1h"}, flags...)...)
	if code != 0 || !strings.Contains(plan, "max_age: ") || !strings.Contains(plan, "-> 1h0m0s") {
		t.Fatalf("init --dry-run: exit %d, printed %q, %s", code, plan, errOut)
	}
	if again, _, _ := run(t, append([]string{"registry", "init", "--dry-run", "--replicas", "1", "--max-age", "1h"}, flags...)...); again != plan {
		t.Fatalf("a second dry run printed %q after %q: the first changed the stream", again, plan)
	}
	if _, errOut, code := run(t, append([]string{"registry", "init", "--replicas", "1", "--max-age", "1h"}, flags...)...); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	if plan, _, code := run(t, append([]string{"registry", "init", "--dry-run", "--replicas", "1", "--max-age", "1h"}, flags...)...); code != 0 || strings.TrimSpace(plan) != "no changes" {
		t.Fatalf("init --dry-run after init: exit %d, printed %q, want no changes", code, plan)
	}
	watchOut := &syncbuf.Buffer{}
	watch := newRootCmd(watchOut, watchOut)
	watch.SetArgs(append([]string{"registry", "watch", "--service", "web"}, flags...))
	wctx, stopWatch := context.WithTimeout(context.Background(), 60*time.Second)
	defer stopWatch()
	watchDone := make(chan error, 1)
	go func() { watchDone <- watch.ExecuteContext(wctx) }()
	waitFor(t, watchOut, `"type":"synced"`)

	reg := append([]string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080", "--ttl", "30s", "--annotation", "team=edge"}, flags...)
	if _, errOut, code := run(t, reg...); code != 0 {
		t.Fatalf("register: exit %d: %s", code, errOut)
	}
	lookup, _, code := run(t, append([]string{"registry", "lookup", "--service", "web"}, flags...)...)
	if code != 0 || !strings.Contains(lookup, "10.0.0.2") || !strings.Contains(lookup, "30s") {
		t.Fatalf("lookup: exit %d: %q", code, lookup)
	}
	waitFor(t, watchOut, `"type":"added"`)
	if _, errOut, code := run(t, append([]string{"registry", "unregister", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080"}, flags...)...); code != 0 {
		t.Fatalf("unregister: %s", errOut)
	}
	waitFor(t, watchOut, `"type":"removed"`)
	stopWatch()
	if err := <-watchDone; err != nil {
		t.Fatalf("watch: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDevRegistrar registers through the registrar dev runs and reads the result back
// from the JetStream stream behind it.
func TestDevRegistrar(t *testing.T) {
	out, stop := startDev(t)
	natsURL := fieldAfter(waitFor(t, out, "NATS JetStream"), "NATS JetStream")
	regAddr := fieldAfter(waitFor(t, out, "  Registrar "), "  Registrar ")
	via := []string{"--registry-backend", "registrar", "--registrar-address", regAddr}
	reg := append([]string{"registry", "register", "--cluster", "east", "--service", "api", "--protocol", "grpc", "--address", "10.1.0.9", "--port", "9090"}, via...)
	if _, errOut, code := run(t, reg...); code != 0 {
		t.Fatalf("register via registrar: exit %d: %s", code, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lookup, _, code := run(t, "registry", "lookup", "--service", "api", "--nats-url", natsURL)
		if code == 0 && strings.Contains(lookup, "10.1.0.9") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registrar never persisted the write to JetStream: %q", lookup)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDevControlPlane manages the dev control plane with switchboard ctl.
func TestDevControlPlane(t *testing.T) {
	out, stop := startDev(t)
	nb := fieldAfter(waitFor(t, out, "  Control plane "), "  Control plane ")
	if _, errOut, code := run(t, "ctl", "--server", nb, "segment", "add", "tenants"); code != 0 {
		t.Fatalf("segment add: exit %d: %s", code, errOut)
	}
	segs, errOut, code := run(t, "ctl", "--server", nb, "segment", "list", "-o", "json")
	if code != 0 || !strings.Contains(segs, `"tenants"`) {
		t.Fatalf("segment list: exit %d, %q, %s", code, segs, errOut)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A component that cannot start (its port is taken) fails dev at once and stops what
// was already running, instead of leaving it serving without the others.
func TestDevFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out := &syncbuf.Buffer{}
	cmd := newRootCmd(out, out)
	cmd.SetArgs([]string{"dev", "--nats-listen", "127.0.0.1:0", "--registrar-listen", "127.0.0.1:0",
		"--registrar-health-listen", "127.0.0.1:0", "--controlplane-northbound", "127.0.0.1:0",
		"--controlplane-southbound", taken.Addr().String(), "--controlplane-metrics-listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), taken.Addr().String()+" is in use") || !strings.Contains(err.Error(), "--controlplane-southbound") {
			t.Fatalf("dev returned %v, want the port conflict with the flag that moves it", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev kept running after the control plane failed to start")
	}
}

// TestDevServesHealthAndMetrics: dev prints every address it serves, and the control
// plane's and the registrar's /healthz, /readyz and /metrics answer there.
func TestDevServesHealthAndMetrics(t *testing.T) {
	out, stop := startDev(t)
	reg := waitFor(t, out, "  Registrar ")
	cp := waitFor(t, out, "  Control plane ")
	urls := map[string]string{
		"registrar":     fieldAfter(reg, "health and metrics"),
		"control plane": strings.TrimSuffix(fieldAfter(cp, "health and metrics"), ")"),
	}
	for name, base := range urls {
		if !strings.HasPrefix(base, "http://127.0.0.1:") {
			t.Fatalf("%s: no health address printed: %q", name, base)
		}
		base = strings.TrimSuffix(base, ")")
		for path, want := range map[string]string{"/healthz": "", "/readyz": "", "/metrics": "go_goroutines"} {
			body := httpGet(t, base+path)
			if !strings.Contains(body, want) {
				t.Errorf("%s %s: %q lacks %q", name, path, body, want)
			}
		}
	}
	if sb := fieldAfter(cp, "southbound"); !strings.HasPrefix(sb, "127.0.0.1:") {
		t.Errorf("southbound address not printed: %q", cp)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// httpGet fetches url, failing the test unless it answers 200 within a deadline.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(body)
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevKeepsItsRegistryUntilReset: dev's registry outlives dev, its banner says so,
// and --reset starts it empty.
func TestDevKeepsItsRegistryUntilReset(t *testing.T) {
	dir := t.TempDir()
	lookup := func(url string) string {
		t.Helper()
		out, errOut, code := run(t, "registry", "lookup", "--service", "kept", "--nats-url", url)
		if code != 0 {
			t.Fatalf("lookup: exit %d: %s", code, errOut)
		}
		return out
	}
	for i, c := range []struct {
		args         []string
		banner       string
		registered   bool // the entry of the first run is there
		registerHere bool
	}{
		{nil, "kept across restarts; --reset empties it", false, true},
		{nil, "the registry kept from the last run; --reset empties it", true, false},
		{[]string{"--reset"}, "emptied by --reset", false, false},
	} {
		out, stop := startDev(t, append([]string{"--data-dir", dir}, c.args...)...)
		line := waitFor(t, out, "NATS JetStream")
		if !strings.Contains(line, c.banner) {
			t.Errorf("run %d: banner %q, want it to say %q", i, line, c.banner)
		}
		url := fieldAfter(line, "NATS JetStream")
		if c.registerHere {
			if _, errOut, code := run(t, "registry", "register", "--cluster", "prod", "--service", "kept", "--protocol", "http",
				"--address", "10.0.0.9", "--port", "80", "--ttl", "never", "--nats-url", url); code != 0 {
				t.Fatalf("register: exit %d: %s", code, errOut)
			}
		}
		if got := strings.Contains(lookup(url), "10.0.0.9"); got != (c.registered || c.registerHere) {
			t.Errorf("run %d: the first run's entry listed: %v, want %v", i, got, c.registered || c.registerHere)
		}
		if err := stop(); err != nil {
			t.Fatalf("run %d: dev exited with %v", i, err)
		}
	}
}
