package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

func TestAgentDiscoveryUsageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"xds without backend", []string{"agent", "--xds-listen", "127.0.0.1:0"}, "set --registry-backend"},
		{"dns without backend", []string{"agent", "--dns-listen", "127.0.0.1:0"}, "set --registry-backend"},
		{"xds address", []string{"agent", "--registry-backend", "memory", "--xds-listen", "nope"}, "--xds-listen"},
		{"dns domain", []string{"agent", "--registry-backend", "memory", "--dns-listen", "127.0.0.1:0", "--dns-domain", "."}, "--dns-domain"},
		{"dns ttl", []string{"agent", "--registry-backend", "memory", "--dns-listen", "127.0.0.1:0", "--dns-ttl", "10ms"}, "--dns-ttl"},
		{"dns upstream", []string{"agent", "--registry-backend", "memory", "--dns-listen", "127.0.0.1:0", "--dns-upstream", "8.8.8.8"}, "--dns-upstream"},
		{"xds tls without xds", []string{"agent", "--registry-backend", "memory", "--dns-listen", "127.0.0.1:0", "--xds-tls-cert", "c.pem"}, "set it too"},
		{"xds cert without key", []string{"agent", "--registry-backend", "memory", "--xds-listen", "127.0.0.1:0", "--xds-tls-cert", "c.pem"}, "--xds-tls-cert and --xds-tls-key"},
		{"xds client ca only", []string{"agent", "--registry-backend", "memory", "--xds-listen", "127.0.0.1:0", "--xds-tls-client-ca", "ca.pem"}, "--xds-tls-cert and --xds-tls-key"},
		{"xds spiffe and files", []string{"agent", "--registry-backend", "memory", "--xds-listen", "127.0.0.1:0", "--xds-spiffe-socket", "unix:///x", "--xds-tls-cert", "c.pem"}, "alternatives"},
		{"xds trust domain without mtls", []string{"agent", "--registry-backend", "memory", "--xds-listen", "127.0.0.1:0", "--xds-authorized-trust-domain", "example.org"}, "needs mTLS"},
		{"xds missing certificate", []string{"agent", "--registry-backend", "memory", "--xds-listen", "127.0.0.1:0", "--xds-tls-cert", "/nonexistent/c.pem", "--xds-tls-key", "/nonexistent/k.pem"}, "--xds-tls-cert, --xds-tls-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, c.args...)
			if code != exitUsage || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want it to contain %q), stdout %q", code, exitUsage, errOut, c.msg, out)
			}
		})
	}
}

// freeAddr returns a 127.0.0.1 address whose port was free on UDP and TCP a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	pc, ln, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	ln.Close()
	return addr
}

// TestAgentServesDNSAndXDS: one agent registers a manifest into the memory backend
// and serves it over DNS and xDS.
func TestAgentServesDNSAndXDS(t *testing.T) {
	m := writeFile(t, t.TempDir(), "m.yaml", agentManifest)
	dnsAddr, xdsAddr := freeAddr(t), freeAddr(t)
	logs, stop := startAgent(t, "--manifest", m, "--registry-backend", "memory", "--debounce", "20ms",
		"--dns-listen", dnsAddr, "--dns-domain", "sb.test", "--dns-ttl", "2s", "--xds-listen", xdsAddr)

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsAddr)
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, err := r.LookupHost(ctx, "web.prod.sb.test.")
		cancel()
		if err == nil && slices.Equal(addrs, []string{"10.0.0.1"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("web.prod.sb.test. = %v, %v; want [10.0.0.1]\n%s", addrs, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	// The manifest's "down" entry fails its check and is never registered. The
	// snapshot holds its resources in a map, so their order is the server's; and a
	// snapshot may come before the agent has registered every entry: ACK and read
	// the next one until the set is whole.
	want := []string{"node|prometheus", "web|http"}
	var clusters []string
	for !slices.Equal(clusters, want) {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("xDS clusters: last %v, want %v: %v", clusters, want, err)
		}
		clusters = clusters[:0]
		for _, a := range resp.GetResources() {
			c := &clusterv3.Cluster{}
			if err := a.UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			clusters = append(clusters, c.GetName())
		}
		slices.Sort(clusters)
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if err := st.Send(ack); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, logs.String())
	}
	for _, s := range []string{"serving DNS", "serving xDS"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q", s)
		}
	}
}

// xdsClusters opens an ADS stream to addr with creds and returns the cluster names
// once they are want; or the first error, for a client the server refuses.
func xdsClusters(t *testing.T, addr string, creds credentials.TransportCredentials, want []string) ([]string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType}); err != nil {
		return nil, err
	}
	var clusters []string
	for !slices.Equal(clusters, want) {
		resp, err := st.Recv()
		if err != nil {
			return clusters, err
		}
		clusters = clusters[:0]
		for _, a := range resp.GetResources() {
			c := &clusterv3.Cluster{}
			if err := a.UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			clusters = append(clusters, c.GetName())
		}
		slices.Sort(clusters)
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if err := st.Send(ack); err != nil {
			return clusters, err
		}
	}
	return clusters, nil
}

// xdsPKI is a CA made for the test and, signed by it, files for the agent's xDS
// server (valid for 127.0.0.1) and for a client.
func xdsPKI(t *testing.T) (ca *tlstest.CA, server, client tlsutil.Files) {
	t.Helper()
	ca, err := tlstest.NewCA("xds test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := func(name, id string, hosts ...string) tlsutil.Files {
		leaf, err := ca.Issue(id, hosts...)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(dir, name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	return ca, files("server", "spiffe://example.org/agent/xds", "127.0.0.1"), files("client", "spiffe://example.org/envoy/edge-1")
}

// TestAgentServesXDSOverMTLS: with --xds-tls-cert, --xds-tls-key and
// --xds-tls-client-ca, a client with a certificate from the CA gets the resources;
// one without a certificate, or in plaintext, is refused.
func TestAgentServesXDSOverMTLS(t *testing.T) {
	_, server, client := xdsPKI(t)
	m := writeFile(t, t.TempDir(), "m.yaml", agentManifest)
	addr := freeAddr(t)
	logs, stop := startAgent(t, "--manifest", m, "--registry-backend", "memory", "--debounce", "20ms", "--xds-listen", addr,
		"--xds-tls-cert", server.Cert, "--xds-tls-key", server.Key, "--xds-tls-client-ca", server.CA)
	waitLog(t, logs, "serving xDS")

	withCert, err := tlsutil.ClientConfig(client, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node|prometheus", "web|http"}
	if got, err := xdsClusters(t, addr, credentials.NewTLS(withCert), want); err != nil {
		t.Fatalf("xDS over mTLS: clusters %v, %v\n%s", got, err, logs.String())
	}
	noCert, err := tlsutil.ClientConfig(tlsutil.Files{CA: client.CA}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := xdsClusters(t, addr, credentials.NewTLS(noCert), want); err == nil || status.Code(err) != codes.Unavailable {
		t.Errorf("a client without a certificate got %v, %v; want it refused (Unavailable)", got, err)
	}
	if got, err := xdsClusters(t, addr, insecure.NewCredentials(), want); err == nil || status.Code(err) != codes.Unavailable {
		t.Errorf("a plaintext client got %v, %v; want it refused (Unavailable)", got, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("mTLS on loopback logged a warning:\n%s", logs.String())
	}
}

// TestAgentServesXDSWithSPIFFE: --xds-spiffe-socket serves xDS with the agent's SVID
// from the Workload API, to clients of its trust domain.
func TestAgentServesXDSWithSPIFFE(t *testing.T) {
	ca, _, client := xdsPKI(t)
	leaf, err := ca.Issue("spiffe://example.org/agent/xds", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortTempDir(t), "wl.sock")
	api, err := tlstest.ServeWorkloadAPI(sock, "spiffe://example.org/agent/xds", leaf, ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	m := writeFile(t, t.TempDir(), "m.yaml", agentManifest)
	addr := freeAddr(t)
	logs, stop := startAgent(t, "--manifest", m, "--registry-backend", "memory", "--debounce", "20ms", "--xds-listen", addr,
		"--xds-spiffe-socket", api.Addr())
	waitLog(t, logs, "serving xDS")
	conf, err := tlsutil.ClientConfig(client, "", "example.org")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := xdsClusters(t, addr, credentials.NewTLS(conf), []string{"node|prometheus", "web|http"}); err != nil {
		t.Fatalf("xDS over SPIFFE mTLS: clusters %v, %v\n%s", got, err, logs.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, logs.String())
	}
}

// waitLog waits until the agent has logged want: its listeners are open by then.
func waitLog(t *testing.T, logs *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent never logged %q:\n%s", want, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shortTempDir is a temporary directory with a path short enough for a unix socket.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestAgentWarnsAboutListenersBeyondLoopback: xDS without TLS, or without client
// certificates, and DNS (which has no TLS) warn when they listen beyond loopback.
func TestAgentWarnsAboutListenersBeyondLoopback(t *testing.T) {
	_, server, _ := xdsPKI(t)
	wildcard := func() string {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		return net.JoinHostPort("0.0.0.0", port)
	}
	for _, c := range []struct {
		name string
		args []string
		warn []string // parts of the warnings expected, in order; none when empty
	}{
		{"plaintext xDS and DNS beyond loopback", []string{"--xds-listen", "{xds}", "--dns-listen", "{dns}"},
			[]string{"xDS in plaintext on {xds}", "DNS on {dns}", "enumerate"}},
		{"xDS TLS without client certificates", []string{"--xds-listen", "{xds}", "--xds-tls-cert", server.Cert, "--xds-tls-key", server.Key},
			[]string{"xDS without client certificates on {xds}"}},
		{"mTLS xDS", []string{"--xds-listen", "{xds}", "--xds-tls-cert", server.Cert, "--xds-tls-key", server.Key, "--xds-tls-client-ca", server.CA}, nil},
		{"loopback", []string{"--xds-listen", freeAddr(t), "--dns-listen", freeAddr(t)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			addrs := strings.NewReplacer("{xds}", wildcard(), "{dns}", wildcard())
			args := slices.Clone(c.args)
			for i, a := range args {
				args[i] = addrs.Replace(a)
			}
			logs, stop := startAgent(t, append([]string{"--registry-backend", "memory"}, args...)...)
			waitLog(t, logs, "serving xDS")
			if err := stop(); err != nil {
				t.Fatalf("agent exited with %v\n%s", err, logs.String())
			}
			var warnings []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "level=WARN") {
					warnings = append(warnings, line)
				}
			}
			all := strings.Join(warnings, "\n")
			if len(c.warn) == 0 && len(warnings) > 0 {
				t.Fatalf("unexpected warnings:\n%s", all)
			}
			for _, w := range c.warn {
				if w = addrs.Replace(w); !strings.Contains(all, w) {
					t.Errorf("warnings lack %q:\n%s", w, logs.String())
				}
			}
		})
	}
}
