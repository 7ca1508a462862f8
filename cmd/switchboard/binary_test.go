package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/registry"
)

// binaryEnv names a switchboard binary to test instead of building one (to run the
// exit-code table against another build).
const binaryEnv = "SWITCHBOARD_TEST_BINARY"

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
	buildDir  string
)

// binary returns the path of the real switchboard binary, built once per test run
// (go build, no test hooks), so exit codes and stderr are exactly what users see.
func binary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(binaryEnv); p != "" {
		return p
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "switchboard-bin-"); buildErr != nil {
			return
		}
		builtPath = filepath.Join(buildDir, "switchboard")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", builtPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// removeBinary deletes what binary built; TestMain calls it.
func removeBinary() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

type binResult struct {
	stdout, stderr string
	code           int
}

// runBinary runs the real binary with args in dir (a temp dir when ""), with env
// added to the test's environment, and a deadline: a command that hangs fails.
func runBinary(t *testing.T, dir string, env []string, args ...string) binResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	if dir == "" {
		dir = t.TempDir()
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("switchboard %s: still running after 60s; stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run switchboard: %v", err)
	}
	return binResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// metadataTrap is a stand-in for a cloud instance metadata service that counts the
// connections it receives; the AWS SDK is pointed at it through the environment, so
// a command that walks the AWS credential chain shows up here.
type metadataTrap struct {
	addr  string
	conns atomic.Int64
}

func newMetadataTrap(t *testing.T) *metadataTrap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &metadataTrap{addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.conns.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return m
}

// env is an environment with no AWS access configured, whose metadata service is
// the trap.
func (m *metadataTrap) env(t *testing.T) []string {
	home := t.TempDir()
	return []string{
		"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://" + m.addr,
		"AWS_EC2_METADATA_DISABLED=", "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_WEB_IDENTITY_TOKEN_FILE=", "AWS_CONTAINER_CREDENTIALS_FULL_URI=",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=", "HOME=" + home,
		"AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none"),
	}
}

// TestExitCodesOfTheBinary: every invalid input exits 2 with a message naming what was
// wrong, runtime failures exit 1, and no message is gRPC's raw "rpc error: code = …".
func TestExitCodesOfTheBinary(t *testing.T) {
	nb, _, stopCP := startControlPlane(t, "database:\n  type: in_memory\n")
	defer func() { _ = stopCP() }()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	trap := newMetadataTrap(t)
	ports := []string{"--registrar-listen", "127.0.0.1:0", "--registrar-health-listen", "127.0.0.1:0",
		"--controlplane-northbound", "127.0.0.1:0", "--controlplane-southbound", "127.0.0.1:0",
		"--controlplane-metrics-listen", "127.0.0.1:0"}
	key := []string{"--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080"}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want []string // all in stderr
	}{
		{"listen port out of range", nil, []string{"registrar", "--cluster-name", "prod", "--listen", "127.0.0.1:99999"}, 2,
			[]string{"--listen", "99999", "0..65535"}},
		{"controlplane listen flag", nil, []string{"controlplane", "--northbound-listen", "nohost"}, 2,
			[]string{"--northbound-listen", "host:port"}},
		{"replicas out of range", nil, []string{"registry", "init", "--replicas", "7", "--nats-url", "nats://127.0.0.1:1"}, 2,
			[]string{"replicas 7", "1..5"}},
		{"typed backend flag", nil, []string{"registry", "init", "--replicas", "three"}, 2,
			[]string{"--replicas", "whole number"}},
		{"server-side invalid argument", nil, []string{"ctl", "--server", nb, "segment", "add", "bad name!"}, 2,
			[]string{"invalid input", "bad name!"}},
		{"server unreachable", nil, []string{"ctl", "--server", "127.0.0.1:1", "--timeout", "5s", "node", "list"}, 1,
			[]string{"unavailable"}},
		{"-o is the output format", nil, []string{"registry", "sd", "-o", "yaml", "--registry-backend", "memory"}, 2,
			[]string{"--output", "yaml"}},
		{"one-shot write to memory", nil, append([]string{"registry", "register", "--registry-backend", "memory"}, key...), 2,
			[]string{"memory", "switchboard dev"}},
		{"one-shot unregister from memory", nil, append([]string{"registry", "unregister", "--registry-backend", "memory"}, key...), 2,
			[]string{"memory", "switchboard dev"}},
		{"watch a backend without a change feed (dynamodb)", trap.env(t), []string{"registry", "watch", "--registry-backend", "dynamodb", "--dynamodb-endpoint", "http://127.0.0.1:1"}, 2,
			[]string{"dynamodb", "no change feed"}},
		{"watch a backend without a change feed (cloudmap)", trap.env(t), []string{"registry", "watch", "--registry-backend", "cloudmap", "--cloudmap-endpoint", "http://127.0.0.1:1"}, 2,
			[]string{"cloudmap", "no change feed"}},
		{"a one-shot read of dynamodb without AWS access", trap.env(t), []string{"registry", "lookup", "--registry-backend", "dynamodb", "--dynamodb-endpoint", "http://127.0.0.1:1"}, 1,
			[]string{"AWS access is not configured", "--aws-instance-metadata"}},
		{"a one-shot read of cloudmap without AWS access", trap.env(t), []string{"registry", "lookup", "--registry-backend", "cloudmap", "--cloudmap-endpoint", "http://127.0.0.1:1"}, 1,
			[]string{"AWS access is not configured", "--aws-instance-metadata"}},
		{"port in use", nil, append([]string{"dev", "--nats-listen", taken.Addr().String(), "--data-dir", t.TempDir()}, ports...), 1,
			[]string{taken.Addr().String(), "in use", "--nats-listen"}},
		{"unknown flag", nil, []string{"registry", "lookup", "--nope"}, 2, []string{"unknown flag"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, "", c.env, c.args...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, c.code, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "rpc error") {
				t.Errorf("stderr shows gRPC's raw error:\n%s", r.stderr)
			}
		})
	}
	if n := trap.conns.Load(); n != 0 {
		t.Errorf("the metadata service stand-in received %d connection(s): no command may contact it without AWS access configured", n)
	}
}

// TestInstanceRoleWhenAllowed: --aws-instance-metadata lets the SDK ask the metadata
// service (the trap sees it), which shows the trap would catch a command that did so
// without it.
func TestInstanceRoleWhenAllowed(t *testing.T) {
	trap := newMetadataTrap(t)
	r := runBinary(t, "", trap.env(t), "registry", "lookup", "--registry-backend", "dynamodb",
		"--dynamodb-endpoint", "http://127.0.0.1:1", "--aws-instance-metadata")
	if r.code != 1 || trap.conns.Load() == 0 {
		t.Fatalf("exit %d, %d connection(s) to the metadata stand-in; want exit 1 after asking it; stderr:\n%s", r.code, trap.conns.Load(), r.stderr)
	}
}

// `registry sd -o json` prints JSON; it once wrote a file named "json".
func TestSDOutputFlagIsAFormat(t *testing.T) {
	dir := t.TempDir()
	r := runBinary(t, dir, nil, "registry", "sd", "-o", "json", "--registry-backend", "memory")
	if r.code != 0 || !strings.HasPrefix(strings.TrimSpace(r.stdout), "[") {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("registry sd -o json wrote %s", entries[0].Name())
	}
}

// noChangeFeed is what `registry watch` refuses before opening a backend: it must say
// the truth about each backend, checked here by opening them.
func TestNoChangeFeedListIsTrue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dyn := dynamotest.Start(t)
	dynamotest.SetEnv(t)
	cm := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer cm.Close()
	params := map[string]map[string]string{
		"memory":   nil,
		"dynamodb": {"dynamodb-endpoint": dyn.URL, "dynamodb-table": "feed-check", "dynamodb-create-table": "true"},
		"cloudmap": {"cloudmap-endpoint": cm.URL(), "cloudmap-namespace": "feed-check", "cloudmap-create-namespace": "true"},
	}
	for name := range noChangeFeed {
		if _, err := registry.Lookup(name); err != nil {
			t.Errorf("noChangeFeed names %s: %v", name, err)
		}
	}
	for name, p := range params {
		r, err := registry.Open(ctx, name, p, nil)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		watches := r.CanWatch()
		_ = r.Close()
		if watches == noChangeFeed[name] {
			t.Errorf("%s: has a change feed %v, but noChangeFeed says %v", name, watches, noChangeFeed[name])
		}
	}
}

// serving is a long-running command of the real binary that a test started.
type serving struct {
	stdout, stderr *syncbuf.Buffer
	exit           atomic.Int64 // its exit status, once it exited
}

func (p *serving) code() int { return int(p.exit.Load()) }

// startServing runs the binary with args until the test ends (then interrupts it, and
// kills it 30 s later), and returns once its stdout matches ready, with the match's
// submatches, or once it exits (nil), within 30 s.
func startServing(t *testing.T, ready *regexp.Regexp, args ...string) (*serving, []string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = t.TempDir()
	p := &serving{stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		var exit *exec.ExitError
		if err := cmd.Wait(); errors.As(err, &exit) {
			p.exit.Store(int64(exit.ExitCode()))
		}
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		if m := ready.FindStringSubmatch(p.stdout.String()); m != nil {
			return p, m
		}
		select {
		case <-done:
			return p, nil
		case <-deadline:
			t.Fatalf("switchboard %s: neither serving nor exited within 30s; stderr:\n%s", strings.Join(args, " "), p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
