package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
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

// registrarProcess is a `switchboard registrar` a test runs as the real binary.
type registrarProcess struct {
	*serving
	addr   string // the gRPC address it printed; "" when it exited first
	health string // the health address it printed
}

var listeningLine = regexp.MustCompile(`gRPC on (\S+), health on (\S+)`)

// startRegistrar runs the binary's registrar for cluster east with args until it
// says where it listens (it is stopped when the test ends) or exits, within 30 s.
func startRegistrar(t *testing.T, args ...string) *registrarProcess {
	t.Helper()
	p, m := startServing(t, listeningLine, append([]string{"registrar", "--cluster-name", "east", "--registry-backend", "memory"}, args...)...)
	r := &registrarProcess{serving: p}
	if m != nil {
		r.addr, r.health = m[1], m[2]
	}
	return r
}

// registrarPKI writes a CA whose certificate names trust domain example.org (as a
// SPIRE CA's does) and the registrar's certificate and key, all in dir.
func registrarPKI(t *testing.T) (*tlstest.CA, tlsutil.Files) {
	t.Helper()
	ca, err := tlstest.NewCAWithID("mesh CA", "spiffe://example.org")
	if err != nil {
		t.Fatal(err)
	}
	return ca, writeLeaf(t, ca, tlstest.Names{URIs: []string{"spiffe://example.org/registrar"}, IPs: []string{"127.0.0.1"}}, "server")
}

func writeLeaf(t *testing.T, ca *tlstest.CA, names tlstest.Names, name string) tlsutil.Files {
	t.Helper()
	leaf, err := ca.IssueNames(names)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteFiles(t.TempDir(), name, leaf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A registrar with a server certificate but no client CA cannot tell agents apart:
// any host that reaches it could register or remove any node's endpoints. So, as in
// plaintext, it serves beyond loopback only with --insecure, and then says so.
func TestRegistrarTLSWithoutClientAuthIsLoopbackOnly(t *testing.T) {
	_, server := registrarPKI(t)
	tlsArgs := []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--health-listen", ""}
	for name, tc := range map[string]struct {
		args []string
		want []string // in stderr
	}{
		"default listen":      {nil, []string{"--listen :9443", "--tls-client-ca", "--spiffe-socket", "--insecure"}},
		"wildcard":            {[]string{"--listen", "0.0.0.0:0"}, []string{"--listen 0.0.0.0:0", "--tls-client-ca", "--insecure"}},
		"unspecified address": {[]string{"--listen", ":0"}, []string{"--listen :0", "--tls-client-ca", "--insecure"}},
	} {
		t.Run(name, func(t *testing.T) {
			p := startRegistrar(t, append(tlsArgs, tc.args...)...)
			if p.addr != "" {
				t.Fatalf("started on %s, want exit 2 refusing TLS without client certificates beyond loopback; stderr:\n%s", p.addr, p.stderr)
			}
			if p.code() != exitUsage {
				t.Errorf("exit %d, want %d", p.code(), exitUsage)
			}
			for _, w := range tc.want {
				if !strings.Contains(p.stderr.String(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, p.stderr)
				}
			}
		})
	}
	t.Run("loopback", func(t *testing.T) {
		if p := startRegistrar(t, append(tlsArgs, "--listen", "127.0.0.1:0")...); p.addr == "" {
			t.Fatalf("on loopback: exit %d, want it serving; stderr:\n%s", p.code(), p.stderr)
		}
	})
	t.Run("insecure", func(t *testing.T) {
		p := startRegistrar(t, append(tlsArgs, "--listen", "0.0.0.0:0", "--insecure")...)
		if p.addr == "" {
			t.Fatalf("with --insecure: exit %d, want it serving; stderr:\n%s", p.code(), p.stderr)
		}
		if log := p.stderr.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "0.0.0.0:0") || !strings.Contains(log, "without client certificates") {
			t.Fatalf("with --insecure: no warning naming the address and the risk:\n%s", log)
		}
	})
}

// /metrics, /healthz and /readyz listen on loopback unless --health-listen says
// otherwise, as the agent's and the control plane's do.
func TestRegistrarHealthListenDefaultsToLoopback(t *testing.T) {
	p := startRegistrar(t, "--listen", "127.0.0.1:0")
	// When another process holds the port, the registrar exits naming the address it
	// tried: the default is what is checked either way.
	if got := p.health + p.stderr.String(); !strings.Contains(got, "127.0.0.1:8081") {
		t.Fatalf("health on %q (exit %d), want the default 127.0.0.1:8081; stderr:\n%s", p.health, p.code(), p.stderr)
	}
}

// With mTLS from files and no --authorized-trust-domain, the registrar takes the
// trust domain from the client CA (and says so), and an identity is a SPIFFE ID of
// that trust domain and nothing else. None of these certificates, all signed by the
// registrar's CA, may act as node-b.
func TestRegistrarIdentityIsASPIFFEIDOfTheTrustDomain(t *testing.T) {
	ca, server := registrarPKI(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("grants:\n  - identity: spiffe://example.org/platform/*\n    services: [web]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startRegistrar(t, "--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", server.CA,
		"--write-policy", policy, "--listen", "127.0.0.1:0", "--health-listen", "")
	if p.addr == "" {
		t.Fatalf("exit %d, want the registrar serving; stderr:\n%s", p.code(), p.stderr)
	}
	if log := p.stderr.String(); !strings.Contains(log, "trust_domain=example.org") {
		t.Errorf("the log does not state the trust domain taken from the CA:\n%s", log)
	}
	as := func(names tlstest.Names) registrarv1.RegistrarClient {
		return registrarClient(t, p.addr, writeLeaf(t, ca, names, "client"))
	}
	nodeB := as(tlstest.Names{URIs: []string{"spiffe://example.org/agent/node-b"}})
	own := endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 80, Node: "node-b"}
	forged := own
	forged.Address = "10.0.0.9"

	for name, names := range map[string]tlstest.Names{
		"another trust domain": {URIs: []string{"spiffe://evil.org/agent/node-b"}},
		"a query":              {URIs: []string{"spiffe://example.org/agent/node-a?x=/node-b"}},
		"DNS SAN only":         {DNSNames: []string{"node-b"}},
		"common name only":     {CommonName: "node-b"},
	} {
		t.Run(name, func(t *testing.T) {
			register(t, nodeB, own)
			attacker := as(names)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := attacker.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: []*registryv1.Endpoint{own.ToProto()}})
			refusedOrUnauthenticated(t, "unregister node-b's endpoint", err)
			_, err = attacker.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{forged.ToProto()}})
			refusedOrUnauthenticated(t, "register an endpoint of node-b", err)
			if got := listAddresses(t, nodeB); !slices.Equal(got, []string{"10.0.0.2"}) {
				t.Fatalf("after the attempts the registrar holds %v, want node-b's 10.0.0.2 alone", got)
			}
		})
	}

	// Grants still work with SPIFFE IDs, and another node of the trust domain is
	// still held to its own.
	register(t, as(tlstest.Names{URIs: []string{"spiffe://example.org/platform/deployer"}}), endpoint.Endpoint{
		Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.3", Port: 80, Node: "node-x"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodeA := as(tlstest.Names{URIs: []string{"spiffe://example.org/agent/node-a"}})
	if _, err := nodeA.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: []*registryv1.Endpoint{own.ToProto()}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node-a removing node-b's endpoint: %v, want PermissionDenied", err)
	}
	if got := listAddresses(t, nodeB); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.3"}) {
		t.Fatalf("the registrar holds %v, want node-b's and the granted write", got)
	}
}

// registrarClient dials addr over mTLS with the certificate in f, checking the
// registrar's SPIFFE ID.
func registrarClient(t *testing.T, addr string, f tlsutil.Files) registrarv1.RegistrarClient {
	t.Helper()
	conf, err := tlsutil.ClientConfig(f, "", "example.org")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registrarv1.NewRegistrarClient(conn)
}

func register(t *testing.T, c registrarv1.RegistrarClient, e endpoint.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{e.ToProto()}}); err != nil {
		t.Fatalf("register %s as node %s: %v", e.Key(), e.Node, err)
	}
}

func listAddresses(t *testing.T, c registrarv1.RegistrarClient) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range resp.GetEndpoints() {
		out = append(out, e.GetAddress())
	}
	return out
}

// refusedOrUnauthenticated wants err to be a refusal: PERMISSION_DENIED, or a
// handshake the registrar refused (UNAVAILABLE, naming TLS or the closed connection).
func refusedOrUnauthenticated(t *testing.T, what string, err error) {
	t.Helper()
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unavailable:
		t.Logf("%s: %v", what, err)
	default:
		t.Fatalf("%s: %v, want PermissionDenied or a refused handshake", what, err)
	}
}

// With mTLS from files, identities are SPIFFE IDs of one trust domain: when neither
// --authorized-trust-domain nor the CA certificate names it, the registrar does not
// start.
func TestRegistrarMTLSNeedsATrustDomain(t *testing.T) {
	ca, err := tlstest.NewCA("CA without a SPIFFE ID")
	if err != nil {
		t.Fatal(err)
	}
	server := writeLeaf(t, ca, tlstest.Names{URIs: []string{"spiffe://example.org/registrar"}, IPs: []string{"127.0.0.1"}}, "server")
	mtls := []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", server.CA, "--listen", "127.0.0.1:0", "--health-listen", ""}
	p := startRegistrar(t, mtls...)
	if p.addr != "" || p.code() != exitUsage {
		t.Fatalf("started on %q (exit %d), want exit 2; stderr:\n%s", p.addr, p.code(), p.stderr)
	}
	for _, w := range []string{"--tls-client-ca " + server.CA, "no trust domain", "--authorized-trust-domain", "--identity-from"} {
		if !strings.Contains(p.stderr.String(), w) {
			t.Errorf("stderr does not name %q:\n%s", w, p.stderr)
		}
	}
	if p := startRegistrar(t, append(mtls, "--authorized-trust-domain", "example.org")...); p.addr == "" {
		t.Fatalf("with --authorized-trust-domain: exit %d, want it serving; stderr:\n%s", p.code(), p.stderr)
	}
	// With --allow-any-writer no identity is mapped to a node: any certificate the CA
	// signed writes, as before, and no trust domain is needed.
	if p := startRegistrar(t, append(mtls, "--allow-any-writer")...); p.addr == "" {
		t.Fatalf("with --allow-any-writer: exit %d, want it serving; stderr:\n%s", p.code(), p.stderr)
	}
	// --allow-any-writer with a write policy would drop the policy's readers silently.
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("readers: [\"spiffe://example.org/*\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p := startRegistrar(t, append(mtls, "--authorized-trust-domain", "example.org", "--allow-any-writer", "--write-policy", policy)...); p.addr != "" || p.code() != exitUsage || !strings.Contains(p.stderr.String(), "alternatives") {
		t.Errorf("--allow-any-writer with --write-policy: started on %q (exit %d), want exit 2; stderr:\n%s", p.addr, p.code(), p.stderr)
	}
	for name, args := range map[string][]string{
		"unknown source":        {"--identity-from", "uri"},
		"a source without mTLS": {"--identity-from", "dns", "--tls-cert", server.Cert, "--tls-key", server.Key, "--listen", "127.0.0.1:0"},
	} {
		if p := startRegistrar(t, append(args, "--health-listen", "")...); p.addr != "" || p.code() != exitUsage || !strings.Contains(p.stderr.String(), "--identity-from") {
			t.Errorf("%s: started on %q (exit %d), want exit 2 naming --identity-from; stderr:\n%s", name, p.addr, p.code(), p.stderr)
		}
	}
}

// --identity-from cn takes identities from common names, and only from them: a
// certificate named node-b writes node-b's endpoints, and no other's.
func TestRegistrarIdentityFromCommonName(t *testing.T) {
	ca, err := tlstest.NewCA("CA without a SPIFFE ID")
	if err != nil {
		t.Fatal(err)
	}
	server := writeLeaf(t, ca, tlstest.Names{URIs: []string{"spiffe://example.org/registrar"}, IPs: []string{"127.0.0.1"}}, "server")
	p := startRegistrar(t, "--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", server.CA,
		"--identity-from", "cn", "--listen", "127.0.0.1:0", "--health-listen", "")
	if p.addr == "" {
		t.Fatalf("exit %d, want the registrar serving; stderr:\n%s", p.code(), p.stderr)
	}
	nodeB := registrarClient(t, p.addr, writeLeaf(t, ca, tlstest.Names{CommonName: "node-b"}, "b"))
	own := endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 80, Node: "node-b"}
	register(t, nodeB, own)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, names := range map[string]tlstest.Names{
		"another common name": {CommonName: "node-a"},
		"a SPIFFE ID":         {URIs: []string{"spiffe://example.org/agent/node-b"}},
		"a DNS SAN":           {DNSNames: []string{"node-b"}},
	} {
		c := registrarClient(t, p.addr, writeLeaf(t, ca, names, "other"))
		_, err := c.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: []*registryv1.Endpoint{own.ToProto()}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s removing node-b's endpoint: %v, want PermissionDenied", name, err)
		}
	}
	if got := listAddresses(t, nodeB); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("the registrar holds %v, want node-b's 10.0.0.2", got)
	}
}
