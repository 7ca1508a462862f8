package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/etcd"

	// The registrar's client backend, until backends.go imports it for every command.
	_ "github.com/switchboard-mesh/switchboard/registrar/client"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitRegistrarReady waits up to 30 s for the registrar's /readyz to say ready.
func waitRegistrarReady(t *testing.T, healthAddr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("registrar not ready within 30s (last error %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runCmd(ctx context.Context, args ...string) error {
	root := newRootCmd(io.Discard, io.Discard)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// The command serves agents, and on shutdown (SIGINT/SIGTERM cancel the context)
// persists every queued write before it exits.
func TestRegistrarCommandFlushesOnShutdown(t *testing.T) {
	cluster := embedetcd.New(t, embedetcd.Options{})
	endpoints := cluster.Endpoints()[0]
	grpcAddr, healthAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runCmd(ctx, "registrar", "--cluster-name", "east", "--registry-backend", "etcd",
			"--etcd-endpoints", endpoints, "--listen", grpcAddr, "--health-listen", healthAddr,
			"--write-batch-interval", "1h", "--log-level", "error")
	}()
	waitRegistrarReady(t, healthAddr)

	agent, err := registry.Open(ctx, "registrar", map[string]string{"registrar-address": grpcAddr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	var ops []registry.Op
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		ops = append(ops, registry.Register(endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: addr, Port: 80, Priority: 1}))
	}
	if err := agent.Apply(ctx, ops); err != nil {
		t.Fatal(err)
	}
	backend, err := etcd.New(ctx, etcd.Options{Endpoints: cluster.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	if eps, err := backend.List(ctx, endpoint.Filter{}); err != nil || len(eps) != 0 {
		t.Fatalf("before shutdown etcd holds %v (%v): the hour-long batch interval should hold the writes", eps, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("registrar exited with %v, want a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("registrar did not exit within 30s of the signal")
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	if eps, err := backend.List(lctx, endpoint.Filter{}); err != nil || len(eps) != 3 {
		t.Fatalf("after shutdown etcd holds %d endpoints (%v), want the 3 queued writes", len(eps), err)
	}
}

func TestRegistrarCommandUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no cluster":               {"registrar"},
		"bad cluster":              {"registrar", "--cluster-name", "9east"},
		"registrar on registrar":   {"registrar", "--cluster-name", "east", "--registry-backend", "registrar"},
		"trust domain without tls": {"registrar", "--cluster-name", "east", "--authorized-trust-domain", "mesh.test"},
		"spiffe and files":         {"registrar", "--cluster-name", "east", "--spiffe-socket", "unix:///x.sock", "--tls-cert", "c.pem"},
		"cert without key":         {"registrar", "--cluster-name", "east", "--tls-cert", "c.pem"},
		"unknown backend":          {"registrar", "--cluster-name", "east", "--registry-backend", "nope"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := runCmd(ctx, append(args, "--listen", "127.0.0.1:0", "--health-listen", "")...)
		cancel()
		if err == nil || exitCode(err) != exitUsage {
			t.Errorf("%s: error %v (exit %d), want a usage error", name, err, exitCode(err))
		}
		var u usageError
		if err != nil && !errors.As(err, &u) && !errors.Is(err, endpoint.ErrInvalid) && !errors.Is(err, registry.ErrUnknownBackend) {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Without TLS the registrar serves loopback only: a non-loopback --listen is bad
// usage unless --insecure says the operator means it; policy flags need mTLS.
func TestRegistrarPlaintextIsLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "--insecure"},
		{[]string{"--listen", ":0"}, "--insecure"},
		{[]string{"--listen", "127.0.0.1:0", "--write-policy", "p.yaml"}, "need mTLS"},
	} {
		args := append([]string{"registrar", "--cluster-name", "east", "--health-listen", ""}, tc.args...)
		err := runCmd(ctx, args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want bad usage naming %s", tc.args, err, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		addr     string
		given    bool
		insecure bool
		want     string
	}{
		"default becomes loopback":   {":9443", false, false, "127.0.0.1:9443"},
		"loopback as given":          {"[::1]:9443", true, false, "[::1]:9443"},
		"localhost as given":         {"localhost:1", true, false, "localhost:1"},
		"non-loopback with insecure": {"0.0.0.0:9443", true, true, "0.0.0.0:9443"},
	} {
		got, err := plaintextListen("listen", tc.addr, tc.given, tc.insecure)
		if err != nil || got != tc.want {
			t.Errorf("%s: plaintextListen(%q) = %q, %v; want %q", name, tc.addr, got, err, tc.want)
		}
	}
}

// --debug-memory serves /debug/memory on the health address; without it the path is
// not there.
func TestRegistrarDebugMemoryFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		grpcAddr, healthAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		args := []string{"registrar", "--cluster-name", "east", "--registry-backend", "memory",
			"--listen", grpcAddr, "--health-listen", healthAddr, "--log-level", "error"}
		if on {
			args = append(args, "--debug-memory")
		}
		done := make(chan error, 1)
		go func() { done <- runCmd(ctx, args...) }()
		var status int
		var body []byte
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get("http://" + healthAddr + "/debug/memory")
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("health address not serving within 30s: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("registrar exited with %v", err)
		}
		switch {
		case on && (status != http.StatusOK || !strings.Contains(string(body), "heap_inuse_bytes")):
			t.Errorf("with --debug-memory: %d %q, want 200 with heap_inuse_bytes", status, body)
		case !on && status != http.StatusNotFound:
			t.Errorf("without --debug-memory: %d %q, want 404", status, body)
		}
	}
}

// A registrar's refusal reads as the CLI words every server's: "permission denied:
// …", not gRPC's code name.
func TestRegistryCommandWordsRegistrarRefusal(t *testing.T) {
	grpcAddr, healthAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runCmd(ctx, "registrar", "--cluster-name", "east", "--listen", grpcAddr, "--health-listen", healthAddr, "--log-level", "error")
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("registrar did not exit within 30s")
		}
	}()
	waitRegistrarReady(t, healthAddr)
	_, errOut, code := run(t, "registry", "register", "--registry-backend", "registrar", "--registrar-address", grpcAddr,
		"--cluster", "west", "--service", "web", "--protocol", "http", "--address", "10.0.0.1", "--port", "80")
	if code != 1 || !strings.Contains(errOut, `permission denied: endpoints[0].cluster "west"`) || strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("a write for another cluster: exit %d, %q; want 1 and the refusal in words", code, errOut)
	}
}
