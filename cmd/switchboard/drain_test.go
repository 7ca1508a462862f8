package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The drain on SIGTERM as a user runs it: agents as processes of the real binary,
// a JetStream registry between them, real gRPC backends and a proxyless grpc-go
// client that finds them over xDS.

// drainTraffic is the health-service name the client calls: the agents' own gRPC
// checks ask about "" and are not counted as traffic.
const drainTraffic = "traffic"

// grpcBackend is a gRPC server on 127.0.0.1 that counts the calls it serves.
type grpcBackend struct {
	name string
	port int
	hits atomic.Int64
}

func startGRPCBackend(t *testing.T, name string) *grpcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{name: name, port: ln.Addr().(*net.TCPAddr).Port}
	hs := health.NewServer()
	hs.SetServingStatus(drainTraffic, healthpb.HealthCheckResponse_SERVING)
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*healthpb.HealthCheckRequest); ok && r.GetService() == drainTraffic {
			b.hits.Add(1)
		}
		return h(ctx, req)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(count))
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return b
}

func (b *grpcBackend) key() endpoint.Key {
	return endpoint.Key{Cluster: "prod", Service: "web", Protocol: "grpc", Address: "127.0.0.1", Port: b.port}
}

// manifest is an agent's manifest with b as its one entry, gated on b's gRPC health.
func (b *grpcBackend) manifest(t *testing.T) string {
	return writeFile(t, t.TempDir(), b.name+".yaml", fmt.Sprintf(`entries:
  - cluster: prod
    service: web
    protocol: grpc
    address: 127.0.0.1
    port: %d
    node: %s
    checks:
      - grpc: 127.0.0.1:%d
        interval: 200ms
`, b.port, b.name, b.port))
}

// xdsClient is a client of xds:///web through grpc-go's own xDS resolver,
// bootstrapped to an agent's xDS server. It names no locality of its own, so that
// no zone is preferred: both backends take calls until one drains.
func xdsClient(t *testing.T, xdsAddr string) healthpb.HealthClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "drain-client-%s"}
	}`, xdsAddr, t.Name())
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///web", grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// waitOnly sends rounds of calls until one round reaches exactly want among all,
// and fails the test if none has by deadline.
func waitOnly(t *testing.T, c healthpb.HealthClient, all []*grpcBackend, deadline time.Time, want ...*grpcBackend) {
	t.Helper()
	var names, got []string
	for _, b := range want {
		names = append(names, b.name)
	}
	slices.Sort(names)
	for {
		before := make([]int64, len(all))
		for i, b := range all {
			before[i] = b.hits.Load()
		}
		var lastErr error
		for range 10 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second))
			_, lastErr = c.Check(ctx, &healthpb.HealthCheckRequest{Service: drainTraffic})
			cancel()
		}
		got = got[:0]
		for i, b := range all {
			if b.hits.Load() > before[i] {
				got = append(got, b.name)
			}
		}
		slices.Sort(got)
		if slices.Equal(got, names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("by the deadline the calls reached %v, want exactly %v (last call: %v)", got, names, lastErr)
		}
	}
}

// health returns k's health in the registry and whether it is there.
func (f natsFixture) health(t *testing.T, k endpoint.Key) (endpoint.Health, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps, err := f.r.List(ctx, endpoint.Filter{Service: k.Service})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.Key() == k {
			return e.Health, true
		}
	}
	return 0, false
}

// readyzOf returns an agent's /readyz status code and body.
func readyzOf(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// drainSetup is two nodes' agents on one JetStream registry: A publishes backend a
// with a grace period of grace; B publishes backend b and serves xDS to a client
// that calls both.
type drainSetup struct {
	f        natsFixture
	a, b     *grpcBackend
	agentA   *childProc
	metricsA string
	client   healthpb.HealthClient
	all      []*grpcBackend
}

func startDrainSetup(t *testing.T, grace string) *drainSetup {
	t.Helper()
	s := &drainSetup{f: startNATS(t), a: startGRPCBackend(t, "a"), b: startGRPCBackend(t, "b")}
	s.all = []*grpcBackend{s.a, s.b}
	s.metricsA = "127.0.0.1:" + freePort(t)
	xdsAddr, metricsB := freeAddr(t), "127.0.0.1:"+freePort(t)
	s.agentA = startProc(t, "agent A", nil, append([]string{"agent", "--manifest", s.a.manifest(t), "--metrics-listen", s.metricsA,
		"--region", "eu-west", "--zone", "eu-west-1a", "--drain-grace", grace}, s.f.flags...)...)
	agentB := startProc(t, "agent B", nil, append([]string{"agent", "--manifest", s.b.manifest(t), "--metrics-listen", metricsB,
		"--region", "eu-west", "--zone", "eu-west-1b", "--xds-listen", xdsAddr, "--debounce", "20ms", "--drain-grace", "0"}, s.f.flags...)...)
	s.agentA.waitReady(s.metricsA)
	agentB.waitReady(metricsB)
	s.client = xdsClient(t, xdsAddr)
	waitOnly(t, s.client, s.all, time.Now().Add(procWait), s.a, s.b)
	return s
}

// TestAgentDrainsOnSIGTERM: SIGTERM makes agent A publish its entry as draining:
// within a second the xDS client sends its new calls to b only, A's /readyz says it
// drains, and the entry is removed from the registry once the grace period has run
// out, not before.
func TestAgentDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	const grace = 4 * time.Second
	s := startDrainSetup(t, grace.String())
	if h, ok := s.f.health(t, s.a.key()); !ok || h != endpoint.Healthy {
		t.Fatalf("a in the registry: %v, %v; want healthy", h, ok)
	}

	sigterm := time.Now()
	if err := s.agentA.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitOnly(t, s.client, s.all, sigterm.Add(time.Second), s.b)
	t.Logf("new calls left a %v after the SIGTERM", time.Since(sigterm).Round(time.Millisecond))

	if h, ok := s.f.health(t, s.a.key()); !ok || h != endpoint.Draining {
		t.Errorf("a in the registry during the grace period: %v, %v; want draining", h, ok)
	}
	if code, body := readyzOf(t, s.metricsA); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("agent A's /readyz while draining = %d %q; want 503 naming draining", code, body)
	}
	if v := metricValue(t, s.metricsA, "switchboard_agent_draining"); v != "1" {
		t.Errorf("switchboard_agent_draining = %q while draining, want 1", v)
	}
	if time.Since(sigterm) >= grace {
		t.Fatalf("the checks above took the whole grace period (%v): the test cannot tell", grace)
	}
	s.f.eventually(t, "a removed after the grace period", func() bool { _, ok := s.f.health(t, s.a.key()); return !ok })
	if took := time.Since(sigterm); took < grace {
		t.Errorf("a removed %v after the SIGTERM, before the %v grace period ran out", took, grace)
	}
	waitExit(t, s.agentA, 0)
	logged(t, s.agentA, "draining: entries published as draining", "unregistered on shutdown")
}

// TestAgentSecondSIGTERMSkipsTheGrace: with a minute's grace, a second SIGTERM
// removes the entry and stops the agent at once.
func TestAgentSecondSIGTERMSkipsTheGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	s := startDrainSetup(t, "1m")
	if err := s.agentA.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.f.eventually(t, "a draining", func() bool { h, ok := s.f.health(t, s.a.key()); return ok && h == endpoint.Draining })
	second := time.Now()
	if err := s.agentA.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, s.agentA, 0)
	if _, ok := s.f.health(t, s.a.key()); ok {
		t.Error("a still registered after the agent exited")
	}
	if took := time.Since(second); took > 10*time.Second {
		t.Errorf("the agent took %v to stop after the second SIGTERM", took)
	}
	logged(t, s.agentA, "draining: entries published as draining", "draining cut short", "unregistered on shutdown")
}

// logged checks that p logged each of want, in that order.
func logged(t *testing.T, p *childProc, want ...string) {
	t.Helper()
	rest := p.err.String()
	for _, w := range want {
		_, after, ok := strings.Cut(rest, w)
		if !ok {
			t.Errorf("%s did not log %q after the lines before it:\n%s", p.name, w, p.err)
			return
		}
		rest = after
	}
}

// waitExit waits up to procWait for p to exit, with code.
func waitExit(t *testing.T, p *childProc, code int) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(procWait):
		t.Fatalf("%s did not exit within %s", p.name, procWait)
	}
	if got := p.cmd.ProcessState.ExitCode(); got != code {
		t.Fatalf("%s exited with %d, want %d; stderr:\n%s", p.name, got, code, p.err)
	}
}

// TestAgentLocalityUsageErrors: --region, --zone and --drain-grace are checked
// before the agent starts.
func TestAgentLocalityUsageErrors(t *testing.T) {
	m := writeFile(t, t.TempDir(), "m.yaml", "entries: []\n")
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"zone", []string{"--zone", "1a"}, `--zone: invalid endpoint: zone "1a"`},
		{"region", []string{"--region", "eu west"}, `--region: invalid endpoint: region "eu west"`},
		{"negative grace", []string{"--drain-grace", "-1s"}, "--drain-grace -1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, append([]string{"agent", "--manifest", m}, c.args...)...)
			if code != exitUsage || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want it to contain %q), stdout %q", code, exitUsage, errOut, c.msg, out)
			}
		})
	}
	out, _, code := run(t, "agent", "--help")
	for _, f := range []string{"--region", "--zone", "--drain-grace duration", "(default 5s)"} {
		if code != 0 || !strings.Contains(out, f) {
			t.Errorf("agent --help lacks %q", f)
		}
	}
}
