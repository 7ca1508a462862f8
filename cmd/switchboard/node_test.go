package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// subProcess runs `switchboard sub` (the real binary) in the background; its lines
// arrive on the returned channel, closed when it exits.
func subProcess(t *testing.T, args ...string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"sub"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	return lines
}

// pubUntilReceived runs `switchboard pub` until the subscriber prints a line (routes
// converge a moment after the subscription) and returns that line.
func pubUntilReceived(t *testing.T, lines <-chan string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last binResult
	for time.Now().Before(deadline) {
		last = runBinary(t, "", nil, append([]string{"pub"}, args...)...)
		if last.code != 0 && !strings.Contains(last.stderr, "subscribes") {
			t.Fatalf("pub: exit %d: %s", last.code, last.stderr)
		}
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("sub exited without printing a message")
			}
			return line
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("the subscriber never got a message; last pub: exit %d, %s", last.code, last.stderr)
	return ""
}

// freeBase finds a port base with k free consecutive ports on 127.0.0.1.
func freeBase(t *testing.T, k int) int {
	t.Helper()
	// Below Linux's ephemeral range (32768 and up), where nothing else on the machine
	// is handed a port by the kernel: an outgoing connection of a test running beside
	// this one could otherwise take a port of the range between the check and its use.
	for base := 21000 + os.Getpid()%2000; base < 32000; base += k {
		ok := true
		for p := base; p < base+k && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				continue
			}
			_ = l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// TestNodePubSubBinaries: `switchboard node --config` (the real binary) joins a
// control plane; `switchboard sub -o json` on it receives what `switchboard pub` sends
// through a node of another group.
func TestNodePubSubBinaries(t *testing.T) {
	f, err := fabric.Start(context.Background(), fabric.Options{Topology: "links:\n  - group: a\n    neighbors: [b]\n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := f.StartNode(ctx, "a", "n1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("node_id: n1\ngroup: b\nlisten: %s\nexternal_endpoint: %s\ncontrol_plane: [%s]\n",
		listen, listen, f.ControlPlane().SouthboundAddr())), 0o600); err != nil {
		t.Fatal(err)
	}
	nctx, stopNode := context.WithCancel(context.Background())
	nodeCmd := exec.CommandContext(nctx, binary(t), "node", "--config", config, "--log-level", "info")
	nodeOut, _ := nodeCmd.StdoutPipe()
	nodeLog := &syncbuf.Buffer{}
	nodeCmd.Stderr = nodeLog
	if err := nodeCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopNode()
		_ = nodeCmd.Wait()
	})
	first, err := bufio.NewReader(nodeOut).ReadString('\n')
	if err != nil || !strings.Contains(first, "node b/n1 listening on "+listen) {
		t.Fatalf("node's first line %q, %v", first, err)
	}
	go func() { _, _ = io.Copy(io.Discard, nodeOut) }()

	lines := subProcess(t, "--node", listen, "-o", "json", "--count", "1", "org/ns/svc")
	line := pubUntilReceived(t, lines, "--node", a.Addr(), "org/ns/svc", "hello from a")
	var got subLine
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("sub -o json printed %q: %v", line, err)
	}
	if got.Name != "org/ns/svc" || got.Payload != "hello from a" || got.Origin != "a/n1" || got.HopsLeft != 15 || got.Published.IsZero() {
		t.Fatalf("sub -o json: %+v", got)
	}
	checkLogKeys(t, nodeLog.String())
}

// checkLogKeys fails the test for a log line (slog's text form) that names a key
// twice, as when a caller and a callee both add the same attribute.
func checkLogKeys(t *testing.T, log string) {
	t.Helper()
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		seen := map[string]bool{}
		for _, k := range logKeys(line) {
			if seen[k] {
				t.Errorf("log line names %s twice: %s", k, line)
			}
			seen[k] = true
		}
		lines++
	}
	if lines == 0 {
		t.Error("nothing was logged")
	}
}

// logKeys lists the keys of a line slog's text handler wrote: key=value pairs,
// values quoted when they need it.
func logKeys(line string) []string {
	var keys []string
	for {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			return keys
		}
		keys = append(keys, k)
		if strings.HasPrefix(rest, `"`) {
			v, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return keys
			}
			line = rest[len(v):]
		} else if _, after, ok := strings.Cut(rest, " "); ok {
			line = after
		} else {
			return keys
		}
	}
}

// TestDevFabricPubSub: `switchboard sub` against one of dev's nodes receives a
// `switchboard pub` sent to a node of another group, through cloud. dev's banner is
// one block, not lines among its start-up logs (here at info, on the same output).
func TestDevFabricPubSub(t *testing.T) {
	base := freeBase(t, 6)
	out, stop := startDev(t, "--no-nodes=false", "--nodes-base-port", strconv.Itoa(base), "--log-level", "info")
	edgeA := fieldAfter(waitFor(t, out, "  edge-a/n1 "), "edge-a/n1 ") // the banner's line, not a log's
	edgeB := fieldAfter(waitFor(t, out, "  edge-b/n2 "), "edge-b/n2 ")
	checkBannerWhole(t, out.String())
	lines := subProcess(t, "--node", edgeA, "--count", "1", "org/dev/svc")
	line := pubUntilReceived(t, lines, "--node", edgeB, "org/dev/svc", "across the fabric")
	if line != "org/dev/svc from edge-b/n2: across the fabric" {
		t.Fatalf("sub printed %q", line)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The nodes leave first, deregistering from a control plane that still runs.
	checkQuietShutdown(t, out)
}

// checkBannerWhole fails the test unless every line from dev's "is running" to its
// last node's is part of the banner (indented), not a log line.
func checkBannerWhole(t *testing.T, out string) {
	t.Helper()
	_, banner, ok := strings.Cut(out, "switchboard dev is running")
	if !ok {
		t.Fatalf("no banner:\n%s", out)
	}
	last := strings.Index(banner, "  edge-b/n2 ")
	if last < 0 {
		t.Fatalf("no edge-b/n2 in the banner:\n%s", banner)
	}
	for _, line := range strings.Split(banner[:last], "\n")[1:] {
		if !strings.HasPrefix(line, "  ") {
			t.Errorf("a line inside dev's banner: %q", line)
		}
	}
}

// TestNodeCommandsUsage: bad input exits 2 naming what was wrong.
func TestNodeCommandsUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("node_id: n1\ngroup: b\nlisten: 127.0.0.1:0\nqueue: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node"}, "--config is required"},
		{[]string{"node", "--config", bad}, "queue"},
		{[]string{"pub", "org/ns", "x"}, "org/ns"},
		{[]string{"sub", "-o", "xml", "org/ns/svc"}, `-o "xml"`},
	} {
		r := runBinary(t, "", nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("switchboard %s: exit %d, stderr %q; want 2 naming %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// TestDevNodesMoveOffTakenDefaultPorts: when one of the nodes' default ports is taken
// (on Linux they lie in the range outgoing connections take their ports from, and
// such a connection's port stays taken for a minute after it closes), dev still
// starts, its nodes on ports the system picks, and says so; a base the user chose
// that is taken fails dev before anything starts.
func TestDevNodesMoveOffTakenDefaultPorts(t *testing.T) {
	base := freeBase(t, 6)
	held, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+1))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	defer func(old int) { defaultNodesBasePort = old }(defaultNodesBasePort)
	defaultNodesBasePort = base

	out, stop := startDev(t, "--no-nodes=false")
	waitFor(t, out, "default ports are taken")
	edgeA := fieldAfter(waitFor(t, out, "  edge-a/n1 "), "edge-a/n1 ") // the banner's line, not a log's
	edgeB := fieldAfter(waitFor(t, out, "edge-b/n2 "), "edge-b/n2 ")
	for _, addr := range []string{edgeA, edgeB} {
		_, p, _ := net.SplitHostPort(addr)
		if port, _ := strconv.Atoi(p); port >= base && port < base+6 {
			t.Fatalf("a node listens on %s, in the taken default range from %d", addr, base)
		}
	}
	lines := subProcess(t, "--node", edgeA, "--count", "1", "org/dev/svc")
	if line := pubUntilReceived(t, lines, "--node", edgeB, "org/dev/svc", "moved"); line != "org/dev/svc from edge-b/n2: moved" {
		t.Fatalf("sub printed %q", line)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	out, stop = startDev(t, "--no-nodes=false", "--nodes-base-port", strconv.Itoa(base))
	err = stop()
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(base+1)) || !strings.Contains(err.Error(), "--nodes-base-port") {
		t.Fatalf("dev with a taken --nodes-base-port: %v, want an error naming the port and the flag", err)
	}
	if strings.Contains(out.String(), "is running") {
		t.Fatalf("dev started before refusing the taken ports:\n%s", out)
	}
}

// nodeRun is what `switchboard node` did within a few seconds: it exited (code), or it
// was still running (and was stopped).
type nodeRun struct {
	code           int
	running        bool
	stdout, stderr string
}

// runNodeBriefly runs `switchboard node` (the real binary) with args until it exits,
// or until it prints that it listens, then stops it.
func runNodeBriefly(t *testing.T, args ...string) nodeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"node"}, args...)...)
	var out, errOut syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			r := nodeRun{stdout: out.String(), stderr: errOut.String()}
			if exit, ok := err.(*exec.ExitError); ok {
				r.code = exit.ExitCode()
			}
			return r
		case <-time.After(20 * time.Millisecond):
		}
		if strings.Contains(out.String(), "listening on") {
			time.Sleep(200 * time.Millisecond) // for the warnings that follow
			_ = cmd.Process.Signal(os.Interrupt)
			<-done
			return nodeRun{running: true, stdout: out.String(), stderr: errOut.String()}
		}
	}
}

// TestNodeRefusesPlaintextBeyondLoopback: without TLS the node cannot tell its peers
// and clients apart, so a plaintext listener on a non-loopback address exits 2 naming
// the address and the way out, unless --insecure (or allow_insecure_remote: true) says
// it is meant — then it starts and warns. Loopback, and TLS, start without a word.
func TestNodeRefusesPlaintextBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("node")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("spiffe://b/node/n1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "node", leaf)
	if err != nil {
		t.Fatal(err)
	}
	config := func(name, extra string) string {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte("node_id: n1\ngroup: b\n"+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const warning = "without authenticating who dials"
	plain := config("plain", "listen: 0.0.0.0:0\n")
	r := runNodeBriefly(t, "--config", plain)
	if r.running || r.code != 2 || !strings.Contains(r.stderr, "0.0.0.0:0") || !strings.Contains(r.stderr, "--insecure") {
		t.Errorf("plaintext on 0.0.0.0: running %v, exit %d, stderr %q; want exit 2 naming the address and --insecure", r.running, r.code, r.stderr)
	}
	// A server certificate alone does not say who dials either.
	serverOnly := config("server-only", fmt.Sprintf("listen: 0.0.0.0:0\ntls: {cert_file: %s, key_file: %s}\n", files.Cert, files.Key))
	if r := runNodeBriefly(t, "--config", serverOnly); r.running || r.code != 2 || !strings.Contains(r.stderr, "without client certificates") {
		t.Errorf("TLS without ca_file on 0.0.0.0: running %v, exit %d, stderr %q; want exit 2 naming the missing client CA", r.running, r.code, r.stderr)
	}
	for _, tc := range []struct {
		what string
		args []string
	}{
		{"--insecure", []string{"--config", plain, "--insecure"}},
		{"allow_insecure_remote: true", []string{"--config", config("allowed", "listen: 0.0.0.0:0\nallow_insecure_remote: true\n")}},
	} {
		r := runNodeBriefly(t, tc.args...)
		if !r.running || !strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, warning) {
			t.Errorf("plaintext on 0.0.0.0 with %s: running %v (exit %d), stderr %q; want it running, with a warning", tc.what, r.running, r.code, r.stderr)
		}
	}
	for _, tc := range []struct{ what, extra string }{
		{"plaintext on loopback", "listen: 127.0.0.1:0\n"},
		{"mTLS on 0.0.0.0", fmt.Sprintf("listen: 0.0.0.0:0\ntls: {ca_file: %s, cert_file: %s, key_file: %s}\n", files.CA, files.Cert, files.Key)},
	} {
		r := runNodeBriefly(t, "--config", config(strings.ReplaceAll(tc.what, " ", "-"), tc.extra))
		if !r.running || strings.Contains(r.stderr, warning) {
			t.Errorf("%s: running %v (exit %d), stderr %q; want it running without a warning", tc.what, r.running, r.code, r.stderr)
		}
	}
}
