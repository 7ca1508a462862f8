package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// TestControlPlaneListenFlags: the listen flags move the ports without a config file,
// and win over one; the moved southbound port answers the gRPC health check.
func TestControlPlaneListenFlags(t *testing.T) {
	nb, sb := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	// The file names other ports: the flags must win.
	out, stop := runCPCommandArgs(t, "northbound:\n  endpoint: 127.0.0.1:1\nsouthbound:\n  endpoint: 127.0.0.1:2\n",
		"--northbound-listen", nb, "--southbound-listen", sb, "--metrics-listen", "127.0.0.1:0")
	if got := fieldAfter(waitFor(t, out, "northbound"), "northbound"); got != nb {
		t.Fatalf("northbound on %s, want %s", got, nb)
	}
	if got := fieldAfter(waitFor(t, out, "southbound"), "southbound"); got != sb {
		t.Fatalf("southbound on %s, want %s", got, sb)
	}
	// API mode on the in-memory store: the banner says what a restart loses.
	waitFor(t, out, "database in_memory: segments and links added through the API are lost on restart")
	mustCtl(t, nb, "segment", "add", "moved")
	cc, err := grpc.NewClient(sb, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the southbound port: %v, %v", resp, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// runCPCommandArgs runs `switchboard controlplane --config FILE ARGS...` in-process
// until the test ends or stop is called.
func runCPCommandArgs(t *testing.T, body string, args ...string) (*syncbuf.Buffer, func() error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cp.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncbuf.Buffer{}
	cmd := newRootCmd(out, out)
	cmd.SetArgs(append([]string{"controlplane", "--config", path, "--log-level", "error"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(cancel)
	return out, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("controlplane did not stop")
			return nil
		}
	}
}

// TestControlPlaneRefusesUnauthenticatedRemoteSouthbound runs the real binary: a
// southbound endpoint with TLS and no registration_auth defaults to every interface,
// where anyone could register as any node, so start-up is refused (exit 2, naming the
// address and what to configure) before anything listens. With registration auth it
// gets past the check; with --insecure too, and then serves and says so at warn level.
func TestControlPlaneRefusesUnauthenticatedRemoteSouthbound(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "server", leaf)
	if err != nil {
		t.Fatal(err)
	}
	// Start-up that gets past the check fails next on this port, before it listens.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	southTLS := fmt.Sprintf("southbound:\n  tls: {cert_file: %s, key_file: %s}\n", files.Cert, files.Key)
	noAuth := write("noauth.yaml", fmt.Sprintf("northbound:\n  endpoint: %s\n", taken.Addr())+southTLS)
	r := runBinary(t, "", nil, "controlplane", "--config", noAuth, "--metrics-listen", "")
	for _, want := range []string{"southbound endpoint 0.0.0.0:50052 has no registration_auth", "registration_auth (type shared_secret or spire)", "--insecure"} {
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Fatalf("TLS southbound without registration_auth: exit %d, want 2 and %q; stderr:\n%s", r.code, want, r.stderr)
		}
	}
	withAuth := write("auth.yaml", fmt.Sprintf("northbound:\n  endpoint: %s\n", taken.Addr())+southTLS+
		"registration_auth:\n  type: shared_secret\n  secrets: {cloud: "+strings.Repeat("s", 32)+"}\n")
	for _, args := range [][]string{{"--config", withAuth}, {"--config", noAuth, "--insecure"}} {
		r := runBinary(t, "", nil, append([]string{"controlplane", "--metrics-listen", ""}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, taken.Addr().String()+" is in use") {
			t.Fatalf("%v: exit %d, want the start-up to get past the check; stderr:\n%s", args, r.code, r.stderr)
		}
	}
	allowed := write("allowed.yaml", "northbound:\n  endpoint: 127.0.0.1:0\n"+
		fmt.Sprintf("southbound:\n  endpoint: 0.0.0.0:0\n  tls: {cert_file: %s, key_file: %s}\n", files.Cert, files.Key))
	p := startCPBinary(t, "--config", allowed, "--metrics-listen", "", "--insecure")
	if p.south == "" {
		t.Fatalf("with --insecure: exit %d, want it serving; stderr:\n%s", p.code(), p.stderr)
	}
	if log := p.stderr.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "southbound endpoint 0.0.0.0:0 has no registration_auth") {
		t.Fatalf("with --insecure: no warning naming the address and the risk:\n%s", log)
	}
}

// cpBinary is a running `switchboard controlplane` (the real binary).
type cpBinary struct {
	*serving
	south string // the southbound address it printed; "" when it exited first
}

var southboundLine = regexp.MustCompile(`(?m)^\s*southbound\s+(\S+)\s*$`)

// startCPBinary runs the binary's controlplane command until the test ends, and
// returns once it prints its southbound address or exits.
func startCPBinary(t *testing.T, args ...string) *cpBinary {
	t.Helper()
	p, m := startServing(t, southboundLine, append([]string{"controlplane"}, args...)...)
	cp := &cpBinary{serving: p}
	if m != nil {
		cp.south = m[1]
	}
	return cp
}
