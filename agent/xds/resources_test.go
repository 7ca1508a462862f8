package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func mk(cluster, service, protocol, addr string, port, priority, weight int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: addr, Port: port, Priority: priority, Weight: weight}
}

func names(list []types.Resource) []string {
	var out []string
	for _, r := range list {
		out = append(out, resourceName(r))
	}
	return out
}

func mustBuild(t *testing.T, eps ...endpoint.Endpoint) resources {
	t.Helper()
	endpoint.Sort(eps)
	r, err := build(eps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestClustersListenersAndRoutes(t *testing.T) {
	r := mustBuild(t,
		mk("prod", "web", "grpc", "10.0.0.1", 8080, 1, 0),
		mk("prod", "web", "http", "10.0.0.1", 80, 1, 0),
		mk("prod", "db", "tcp", "10.0.0.2", 5432, 1, 0),
		mk("prod", "cache", "tcp", "10.0.0.3", 6379, 1, 0),
		mk("prod", "cache", "http", "10.0.0.3", 80, 1, 0),
		mk("prod", "noport", "tcp", "10.0.0.4", 0, 1, 0),
	)
	if got, want := names(r.clusters), []string{"cache|http", "cache|tcp", "db|tcp", "web|grpc", "web|http"}; !slices.Equal(got, want) {
		t.Errorf("clusters = %v, want %v", got, want)
	}
	if got, want := names(r.endpoints), names(r.clusters); !slices.Equal(got, want) {
		t.Errorf("load assignments = %v, want one per cluster %v", got, want)
	}
	// cache has two protocols and none is gRPC: no listener can pick one.
	if got, want := names(r.listeners), []string{"db", "web"}; !slices.Equal(got, want) {
		t.Errorf("listeners = %v, want %v", got, want)
	}
	routeCluster := map[string]string{}
	for _, res := range r.routes {
		rc := res.(*routev3.RouteConfiguration)
		routeCluster[rc.GetName()] = rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
	}
	if routeCluster["web"] != "web|grpc" || routeCluster["db"] != "db|tcp" {
		t.Errorf("routes send web to %q and db to %q; want web|grpc and db|tcp", routeCluster["web"], routeCluster["db"])
	}
	for _, res := range r.clusters {
		c := res.(*clusterv3.Cluster)
		_, h2 := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if want := c.GetName() == "web|grpc"; h2 != want {
			t.Errorf("cluster %s: HTTP/2 upstream options %v, want %v", c.GetName(), h2, want)
		}
	}
	l := r.listeners[1].(*listenerv3.Listener)
	if l.GetApiListener() == nil {
		t.Errorf("listener %s has no API listener", l.GetName())
	}
}

func TestLocalitiesPrioritiesAndWeights(t *testing.T) {
	r := mustBuild(t,
		mk("east", "web", "grpc", "10.0.0.1", 80, 5, 10),
		mk("east", "web", "grpc", "10.0.0.2", 80, 5, 30),
		mk("west", "web", "grpc", "10.0.1.1", 80, 5, 0),
		mk("west", "web", "grpc", "10.0.1.2", 80, 9, 7),
		mk("east", "web", "grpc", "10.0.0.3", 80, 200, 1),
		// The same address and port in a second cluster: served once.
		mk("west", "web", "grpc", "10.0.0.1", 80, 5, 10),
	)
	cla := r.endpoints[0].(*endpointv3.ClusterLoadAssignment)
	type loc struct {
		zone     string
		priority uint32
		weight   uint32
		eps      []string
	}
	var got []loc
	for _, l := range cla.GetEndpoints() {
		x := loc{zone: l.GetLocality().GetSubZone(), priority: l.GetPriority(), weight: l.GetLoadBalancingWeight().GetValue()}
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			x.eps = append(x.eps, fmt.Sprintf("%s:%d/%d", sa.GetAddress(), sa.GetPortValue(), e.GetLoadBalancingWeight().GetValue()))
		}
		got = append(got, x)
	}
	// Priorities 5, 9, 200 become 0, 1, 2; weight 0 becomes 1; a locality weighs
	// the sum of its endpoints. Without a region or zone, the Switchboard cluster
	// (the sub-zone) tells localities apart.
	want := []loc{
		{"east", 0, 40, []string{"10.0.0.1:80/10", "10.0.0.2:80/30"}},
		{"west", 0, 1, []string{"10.0.1.1:80/1"}},
		{"west", 1, 7, []string{"10.0.1.2:80/7"}},
		{"east", 2, 1, []string{"10.0.0.3:80/1"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("localities\n got %v\nwant %v", got, want)
	}
}

func TestVersionFollowsContent(t *testing.T) {
	a := mustBuild(t, mk("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	b := mustBuild(t, mk("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	c := mustBuild(t, mk("prod", "web", "grpc", "10.0.0.1", 80, 1, 5))
	va, _ := version(a.endpoints)
	vb, _ := version(b.endpoints)
	vc, _ := version(c.endpoints)
	if va != vb || va == vc {
		t.Errorf("versions: same content %q and %q, other weight %q; want equal, then different", va, vb, vc)
	}
	ca, _ := version(a.clusters)
	cc, _ := version(c.clusters)
	if ca != cc {
		t.Errorf("cluster version changed with an endpoint's weight: %q → %q", ca, cc)
	}
}

// TestRandomEndpointsBuildValidResources builds from many random registries: every
// resource passes its proto validation and every reference is served.
func TestRandomEndpointsBuildValidResources(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	for range 200 {
		var eps []endpoint.Endpoint
		for range rng.IntN(40) {
			addr := fmt.Sprintf("10.0.%d.%d", rng.IntN(3), rng.IntN(5))
			if rng.IntN(4) == 0 {
				addr = fmt.Sprintf("fd00::%x", rng.IntN(6))
			}
			eps = append(eps, mk(pick("a", "b", "c"), pick("web", "db", "api"), pick("grpc", "http", "tcp"),
				addr, rng.IntN(3)*1000, 1+rng.IntN(255), rng.IntN(65536)))
		}
		eps = dedupe(eps)
		endpoint.Sort(eps)
		if _, err := build(eps); err != nil {
			t.Fatalf("build(%v): %v", eps, err)
		}
	}
}

func dedupe(eps []endpoint.Endpoint) []endpoint.Endpoint {
	seen := map[endpoint.Key]bool{}
	var out []endpoint.Endpoint
	for _, e := range eps {
		if !seen[e.Key()] {
			seen[e.Key()] = true
			out = append(out, e)
		}
	}
	return out
}
