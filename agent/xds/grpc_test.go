package xds_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// trafficService is the health-service name the test client calls: the agent's own
// health checks ask about "" and are not counted as traffic.
const trafficService = "traffic"

// backend is a real gRPC server on 127.0.0.1 that counts the calls it serves.
type backend struct {
	name   string
	port   int
	hits   atomic.Int64
	health *health.Server
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, port: ln.Addr().(*net.TCPAddr).Port, health: health.NewServer()}
	b.health.SetServingStatus(trafficService, healthpb.HealthCheckResponse_SERVING)
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*healthpb.HealthCheckRequest); ok && r.GetService() == trafficService {
			b.hits.Add(1)
		}
		return h(ctx, req)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(count))
	healthpb.RegisterHealthServer(gs, b.health)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return b
}

func (b *backend) endpoint(priority int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "grpc", Address: "127.0.0.1",
		Port: b.port, Node: b.name, Priority: priority}
}

// dialXDS returns a client of xds:///service that resolves through grpc-go's own
// xDS resolver, bootstrapped to the agent's xDS server.
func dialXDS(t *testing.T, server net.Addr, service string) *grpc.ClientConn {
	t.Helper()
	return dialXDSIn(t, server, service, "", "")
}

// dialXDSIn is dialXDS for a client whose bootstrap node is in region and zone
// (none when both are empty).
func dialXDSIn(t *testing.T, server net.Addr, service, region, zone string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "test-client-%s-%s-%s", "locality": {"region": %q, "zone": %q}}
	}`, server.String(), t.Name(), region, zone, region, zone)
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitTraffic calls through conn in rounds until one round reaches exactly the
// backends in want, and fails when none has by deadline.
func waitTraffic(t *testing.T, conn *grpc.ClientConn, all []*backend, want []*backend, deadline time.Time) {
	t.Helper()
	client := healthpb.NewHealthClient(conn)
	var names []string
	for _, b := range want {
		names = append(names, b.name)
	}
	slices.Sort(names)
	var got []string
	for {
		before := make([]int64, len(all))
		for i, b := range all {
			before[i] = b.hits.Load()
		}
		for range 3 * len(all) {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: trafficService})
			cancel()
			if err != nil && time.Now().After(deadline) {
				t.Fatalf("traffic reached %v, want exactly %v; last call: %v", got, names, err)
			}
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
			t.Fatalf("traffic reached %v, want exactly %v", got, names)
		}
	}
}

func grpcCheck(b *backend) check.Spec {
	return check.Spec{Kind: check.GRPC, Target: fmt.Sprintf("127.0.0.1:%d", b.port),
		Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 1}
}

// TestProxylessGRPCFollowsTheRegistry runs the whole pipeline: an agent registers
// real gRPC servers in a registry while their health checks pass, its xDS server
// serves that registry, and a grpc-go client with the xds resolver calls them.
func TestProxylessGRPCFollowsTheRegistry(t *testing.T) {
	reg := memory.New()
	t.Cleanup(func() { reg.Close() }) // after the agent's cleanup: it unregisters on the way out
	a, b, c, d, standby := startBackend(t, "a"), startBackend(t, "b"), startBackend(t, "c"), startBackend(t, "d"), startBackend(t, "standby")
	all := []*backend{a, b, c, d, standby}

	xs := startServerOnly(t)
	m := &manifest.Manifest{Entries: []manifest.Entry{
		{Endpoint: a.endpoint(1), Checks: []check.Spec{grpcCheck(a)}},
		{Endpoint: b.endpoint(1), Checks: []check.Spec{grpcCheck(b)}},
	}}
	runAgent(t, reg, m, xs)
	// c is registered by hand, and standby at a lower priority (a higher value).
	apply(t, reg, registry.Register(c.endpoint(1)), registry.Register(standby.endpoint(2)))

	conn := dialXDS(t, xs.Addr(), "web")
	waitTraffic(t, conn, all, []*backend{a, b, c}, time.Now().Add(wait))

	// Unregistered: traffic stops within 2 s.
	start := time.Now()
	apply(t, reg, registry.Unregister(c.endpoint(1)))
	waitTraffic(t, conn, all, []*backend{a, b}, start.Add(2*time.Second))
	t.Logf("unregistered endpoint left the traffic after %v", time.Since(start))

	// Failing its health check: the agent removes it, traffic stops within 2 s.
	start = time.Now()
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	waitTraffic(t, conn, all, []*backend{b}, start.Add(2*time.Second))
	t.Logf("endpoint failing its check left the traffic after %v", time.Since(start))

	// Added: it starts receiving traffic.
	start = time.Now()
	apply(t, reg, registry.Register(d.endpoint(1)))
	waitTraffic(t, conn, all, []*backend{b, d}, start.Add(wait))
	t.Logf("added endpoint received traffic after %v", time.Since(start))

	// Healthy again: the agent registers it again.
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitTraffic(t, conn, all, []*backend{a, b, d}, time.Now().Add(wait))

	// With every priority-1 endpoint gone, the priority-2 one takes the traffic.
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	apply(t, reg, registry.Unregister(d.endpoint(1)))
	waitTraffic(t, conn, all, []*backend{standby}, time.Now().Add(wait))

	if services, all := xs.Demand(); all || !slices.Equal(services, []string{"web"}) {
		t.Errorf("Demand() = %v, %v; want [web], false", services, all)
	}
}

// startServerOnly returns an xDS server whose Serve the agent runs.
func startServerOnly(t *testing.T) *xds.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return xds.New(ln, xds.Options{})
}

func runAgent(t *testing.T, reg registry.Registry, m *manifest.Manifest, servers ...agent.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{
			Manifest:  m,
			Registry:  reg,
			Servers:   servers,
			Discovery: agent.DiscoveryOptions{Debounce: 20 * time.Millisecond},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	})
}

func apply(t *testing.T, reg registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := reg.Apply(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

// inZone is b's endpoint at priority 1 in zone of region eu, in health state h.
func (b *backend) inZone(zone string, h endpoint.Health) endpoint.Endpoint {
	e := b.endpoint(1)
	e.Region, e.Zone, e.Health = "eu", zone, h
	return e
}

// onlyTraffic makes calls through conn and fails if any reaches a backend outside
// want: once waitTraffic saw the traffic settle, it must stay there, since the
// configuration no longer changes.
func onlyTraffic(t *testing.T, conn *grpc.ClientConn, all []*backend, want ...*backend) {
	t.Helper()
	before := make([]int64, len(all))
	for i, b := range all {
		before[i] = b.hits.Load()
	}
	client := healthpb.NewHealthClient(conn)
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: trafficService})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, b := range want {
		names = append(names, b.name)
	}
	for i, b := range all {
		if b.hits.Load() > before[i] && !slices.Contains(want, b) {
			t.Errorf("backend %s was called; only %v should be", b.name, names)
		}
	}
}

// TestProxylessGRPCPrefersItsZone: a grpc-go client whose bootstrap puts it in zone
// eu-a calls only the endpoint in eu-a while it is healthy, and fails over to the
// one in eu-b, same region and priority, when it drains; a client without a
// locality spreads over both, then keeps to the healthy one.
func TestProxylessGRPCPrefersItsZone(t *testing.T) {
	a, b := startBackend(t, "a"), startBackend(t, "b")
	all := []*backend{a, b}
	xs := startServer(t)
	update(t, xs, a.inZone("eu-a", endpoint.Healthy), b.inZone("eu-b", endpoint.Healthy))

	near := dialXDSIn(t, xs.Addr(), "web", "eu", "eu-a")
	anywhere := dialXDS(t, xs.Addr(), "web")
	waitTraffic(t, near, all, []*backend{a}, time.Now().Add(wait))
	onlyTraffic(t, near, all, a)
	waitTraffic(t, anywhere, all, []*backend{a, b}, time.Now().Add(wait))

	update(t, xs, a.inZone("eu-a", endpoint.Draining), b.inZone("eu-b", endpoint.Healthy))
	waitTraffic(t, near, all, []*backend{b}, time.Now().Add(wait))
	onlyTraffic(t, near, all, b)
	waitTraffic(t, anywhere, all, []*backend{b}, time.Now().Add(wait))
	onlyTraffic(t, anywhere, all, b)

	// Healthy again: the client is back in its zone.
	update(t, xs, a.inZone("eu-a", endpoint.Healthy), b.inZone("eu-b", endpoint.Healthy))
	waitTraffic(t, near, all, []*backend{a}, time.Now().Add(wait))
	onlyTraffic(t, near, all, a)
}
