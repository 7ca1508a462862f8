package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/switchboard-mesh/switchboard/agent/dns"
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
