package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
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
