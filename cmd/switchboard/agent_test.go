package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/registry"
	_ "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

const agentManifest = `entries:
  - cluster: prod
    service: web
    protocol: http
    address: 10.0.0.1
    port: 8080
    checks:
      - exec: [true]
        interval: 100ms
  - cluster: prod
    service: node
    protocol: prometheus
    address: 2001:db8::1
    port: 9100
    annotations: {team: edge, prometheus.io/path: /metrics}
  - cluster: prod
    service: down
    protocol: http
    address: 10.0.0.2
    port: 80
    checks:
      - exec: [false]
`

const upstreamTemplate = `{{range registrations "prod" "http" "*" ""}}{{.Service}} {{hostport .Address .Port}}
{{end}}`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgentUsageErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "m.yaml", agentManifest)
	bad := writeFile(t, dir, "bad.yaml", "entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n    colour: blue\n")
	tmpl := writeFile(t, dir, "ok.tmpl", upstreamTemplate)
	broken := writeFile(t, dir, "broken.tmpl", "line one\n{{ range }}\n")
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"nothing to do", []string{"agent"}, "nothing to do"},
		{"bad manifest", []string{"agent", "--manifest", bad}, `line 6, column 5: entries[0]: unknown key "colour"`},
		{"missing manifest", []string{"agent", "--manifest", filepath.Join(dir, "none.yaml")}, "no such file"},
		{"bad render spec", []string{"agent", "--registry-backend", "memory", "--render", "only-template"}, "TEMPLATE:OUT"},
		{"broken template", []string{"agent", "--registry-backend", "memory", "--render", broken + ":" + filepath.Join(dir, "out")}, broken + ":2"},
		{"same output twice", []string{"agent", "--registry-backend", "memory", "--render", tmpl + ":" + filepath.Join(dir, "o"), "--prometheus-sd", filepath.Join(dir, "o")}, "already"},
		{"outputs without backend", []string{"agent", "--manifest", good, "--prometheus-sd", filepath.Join(dir, "sd.json")}, "set --registry-backend"},
		{"unknown backend", []string{"agent", "--manifest", good, "--registry-backend", "nope"}, "unknown registry backend"},
		{"bad debounce", []string{"agent", "--manifest", good, "--debounce", "0s"}, "--debounce"},
		{"pods without cluster", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--node-name", "n1"}, "--pod-cluster"},
		{"pods without node", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "east", "--node-name", ""}, "--node-name"},
		{"pods bad selector", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "east", "--node-name", "n1", "--pod-selector", "a in (b"}, "--pod-selector"},
		{"pods resync too short", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "east", "--node-name", "n1", "--pod-resync", "1ns"}, "--pod-resync"},
		{"pods bad ttl", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "east", "--node-name", "n1", "--pod-ttl", "0s"}, "--pod-ttl"},
		{"pods bad cluster", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "no spaces", "--node-name", "n1"}, "cluster"},
		{"pods bad kubeconfig", []string{"agent", "--cni-socket", filepath.Join(dir, "cni.sock"), "--pod-cluster", "east", "--node-name", "n1", "--kubeconfig", filepath.Join(dir, "none")}, "--kubeconfig"},
		{"render broken template", []string{"registry", "render", "--registry-backend", "memory", broken}, broken + ":2"},
		{"render onto itself", []string{"registry", "render", "--registry-backend", "memory", tmpl, "--out", tmpl}, "overwrite"},
		{"sd bad filter", []string{"registry", "sd", "--registry-backend", "memory", "--address", "nope"}, "address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, c.args...)
			if code != exitUsage || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want it to contain %q), stdout %q", code, exitUsage, errOut, c.msg, out)
			}
		})
	}
}

// startAgent runs `switchboard agent` in-process until the returned stop is called;
// stop cancels its context, as SIGTERM does through main's signal.NotifyContext.
func startAgent(t *testing.T, args ...string) (*syncbuf.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncbuf.Buffer{}
	cmd := newRootCmd(out, out)
	// No drain on stop unless a test asks for one (a later --drain-grace wins): the
	// default 5 s grace would only make each test wait.
	cmd.SetArgs(append([]string{"agent", "--metrics-listen", "127.0.0.1:0", "--drain-grace", "0"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stopped := false
	var result error
	stop := func() error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		select {
		case result = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("agent did not stop within 30s of being interrupted")
		}
		return result
	}
	t.Cleanup(func() { stop() })
	return out, stop
}

func waitFile(t *testing.T, path string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if ok(string(b)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became as expected; last content %q", path, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With the in-process memory backend, the agent publishes into its own registry and
// renders from it: the whole chain manifest -> checks -> gate -> publish -> mirror ->
// outputs in one command.
func TestAgentCommandMemoryBackend(t *testing.T) {
	dir := t.TempDir()
	m := writeFile(t, dir, "m.yaml", agentManifest)
	tmpl := writeFile(t, dir, "up.tmpl", upstreamTemplate)
	out, sd, marker := filepath.Join(dir, "up.conf"), filepath.Join(dir, "sd.json"), filepath.Join(dir, "reloaded")
	logs, stop := startAgent(t, "--manifest", m, "--registry-backend", "memory", "--debounce", "50ms",
		"--render", tmpl+":"+out+":touch "+marker, "--prometheus-sd", sd)

	waitFile(t, out, func(s string) bool { return s == "web 10.0.0.1:8080\n" })
	got := waitFile(t, sd, func(s string) bool { return strings.Contains(s, "9100") })
	groups, err := filesd.Parse([]byte(got))
	if err != nil {
		t.Fatalf("file_sd: %v", err)
	}
	want := map[string]string{"cluster": "prod", "service": "node", "protocol": "prometheus", "team": "edge"}
	if len(groups) != 1 || groups[0].Targets[0] != "[2001:db8::1]:9100" || !equalMaps(groups[0].Labels, want) {
		t.Fatalf("file_sd groups = %+v", groups)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("render command did not run: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, logs.String())
	}
	for _, s := range []string{"serving metrics", "unregistered on shutdown", "entries=2"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, logs.String())
		}
	}
}

func TestAgentCommandWithoutBackend(t *testing.T) {
	m := writeFile(t, t.TempDir(), "m.yaml", agentManifest)
	logs, stop := startAgent(t, "--manifest", m)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "publish gate open") {
		if time.Now().After(deadline) {
			t.Fatalf("entries never passed the gate:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v", err)
	}
	if n := strings.Count(logs.String(), "no-op publisher"); n != 1 {
		t.Fatalf("no-op publisher mentioned %d times:\n%s", n, logs.String())
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// natsFixture is an embedded NATS server and the flags that point a command at a
// stream of its own.
type natsFixture struct {
	flags []string
	r     registry.Registry // the test's own client: "another node"
}

func startNATS(t *testing.T) natsFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	params := map[string]string{"nats-url": s.ClientURL(), "stream": "AGENTTEST", "subject-prefix": "agenttest.reg", "storage": "memory"}
	r, err := registry.Open(ctx, "jetstream", params, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f := natsFixture{r: r, flags: []string{"--registry-backend", "jetstream"}}
	for k, v := range params {
		f.flags = append(f.flags, "--"+k, v)
	}
	return f
}

func (f natsFixture) apply(t *testing.T, ops ...registry.Op) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.r.Apply(ctx, ops); err != nil {
		t.Fatal(err)
	}
}

func (f natsFixture) has(t *testing.T, k endpoint.Key) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps, err := f.r.List(ctx, endpoint.Filter{Service: k.Service})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.Key() == k {
			return true
		}
	}
	return false
}

func (f natsFixture) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRegistrySDAndRenderAgainstJetStream(t *testing.T) {
	f := startNATS(t)
	web := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 80, Priority: 1}
	web2 := web
	web2.Address = "10.0.0.10"
	node := endpoint.Endpoint{Cluster: "prod", Service: "node", Protocol: "prometheus", Address: "2001:db8::5", Port: 9100, Priority: 1}
	f.apply(t, registry.Register(web2), registry.Register(web), registry.Register(node))

	out, errOut, code := run(t, append([]string{"registry", "sd"}, f.flags...)...)
	if code != 0 {
		t.Fatalf("registry sd: exit %d: %s", code, errOut)
	}
	groups, err := filesd.Parse([]byte(out))
	if err != nil || len(groups) != 1 || groups[0].Targets[0] != "[2001:db8::5]:9100" {
		t.Fatalf("registry sd printed %s (%v)", out, err)
	}

	dir := t.TempDir()
	tmpl := writeFile(t, dir, "up.tmpl", upstreamTemplate)
	out, errOut, code = run(t, append([]string{"registry", "render", tmpl}, f.flags...)...)
	if code != 0 || out != "web 10.0.0.2:80\nweb 10.0.0.10:80\n" {
		t.Fatalf("registry render: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	dest := filepath.Join(dir, "up.conf")
	if _, errOut, code = run(t, append([]string{"registry", "render", tmpl, "--out", dest}, f.flags...)...); code != 0 {
		t.Fatalf("registry render --out: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(dest); string(b) != "web 10.0.0.2:80\nweb 10.0.0.10:80\n" {
		t.Fatalf("--out wrote %q", b)
	}
	sdOut := filepath.Join(dir, "sd.json")
	if _, errOut, code = run(t, append([]string{"registry", "sd", "--out", sdOut}, f.flags...)...); code != 0 {
		t.Fatalf("registry sd --out: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(sdOut); !json.Valid(b) || !strings.Contains(string(b), "[2001:db8::5]:9100") {
		t.Fatalf("sd --out wrote %s", b)
	}
}

// The agent as a real process: SIGTERM removes what it registered; SIGKILL leaves the
// entry to expire by its TTL.
func TestAgentProcessSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	f := startNATS(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		sig     syscall.Signal
		service string
	}{{syscall.SIGTERM, "termed"}, {syscall.SIGKILL, "killed"}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			m := writeFile(t, dir, tc.service+".yaml", "entries:\n  - {cluster: prod, service: "+tc.service+", protocol: http, address: 10.0.0.7, port: 80, ttl: 2s}\n")
			key := endpoint.Key{Cluster: "prod", Service: tc.service, Protocol: "http", Address: "10.0.0.7", Port: 80}
			cmd := agentProcess(t, append([]string{"agent", "--manifest", m, "--metrics-listen", ""}, f.flags...)...)
			f.eventually(t, "registered", func() bool { return f.has(t, key) })
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if tc.sig == syscall.SIGTERM && err != nil {
				t.Fatalf("agent exited with %v after SIGTERM; want 0\n%s", err, cmd.Stderr)
			}
			var exit *exec.ExitError
			if tc.sig == syscall.SIGKILL && !errors.As(err, &exit) {
				t.Fatalf("agent exited with %v after SIGKILL", err)
			}
			if tc.sig == syscall.SIGTERM && f.has(t, key) {
				t.Fatal("entry still registered right after the agent exited on SIGTERM")
			}
			f.eventually(t, "entry gone", func() bool { return !f.has(t, key) })
		})
	}
}

const helperEnv = "SWITCHBOARD_AGENT_HELPER_ARGS"

// agentProcess runs the switchboard CLI with args in a child process: this test
// binary, re-entered through TestAgentHelperProcess.
func agentProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	enc, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(enc))
	cmd.Stderr = &syncbuf.Buffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

// TestAgentHelperProcess is the child of agentProcess: it runs the CLI as main does,
// with SIGTERM and Ctrl-C cancelling the command's context.
func TestAgentHelperProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("only runs as the child of agentProcess")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := newRootCmd(os.Stdout, os.Stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Stderr.WriteString("switchboard: " + err.Error() + "\n")
		os.Exit(exitCode(err))
	}
	os.Exit(0)
}
