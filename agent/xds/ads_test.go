package xds_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

var (
	envoyNode     = &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}
	proxylessNode = &corev3.Node{Id: "grpc-1", UserAgentName: "gRPC Go"}
)

func adsClient(t *testing.T, s *xds.Server) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

// streamCtx bounds a test's stream: a Recv that never comes fails the test instead of
// hanging it.
func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

type validator interface{ ValidateAll() error }

// unpack decodes every resource of a response and checks its proto validation.
func unpack(t *testing.T, anys []*anypb.Any) []string {
	t.Helper()
	var names []string
	for _, a := range anys {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.(validator).ValidateAll(); err != nil {
			t.Errorf("served %T fails validation: %v", m, err)
		}
		switch r := m.(type) {
		case *endpointv3.ClusterLoadAssignment:
			names = append(names, r.GetClusterName())
		case interface{ GetName() string }:
			names = append(names, r.GetName())
		}
	}
	slices.Sort(names)
	return names
}

func sotwGet(t *testing.T, st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node *corev3.Node, typeURL string, names ...string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("waiting for %s: %v", typeURL, err)
	}
	if resp.GetTypeUrl() != typeURL {
		t.Fatalf("got %s, want %s", resp.GetTypeUrl(), typeURL)
	}
	// ACK, as a client does.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestEveryServedResourceValidates(t *testing.T) {
	s := startServer(t)
	update(t, s,
		ep("east", "web", "grpc", "10.0.0.1", 8080, 1, 10),
		ep("west", "web", "grpc", "fd00::1", 8080, 2, 0),
		ep("east", "web", "http", "10.0.0.1", 80, 1, 0),
		ep("east", "db", "tcp", "10.0.0.2", 5432, 1, 0),
		// Localities and every health state.
		placedEp("10.0.1.1", 1, "eu", "eu-a", endpoint.Healthy),
		placedEp("10.0.1.2", 1, "eu", "eu-b", endpoint.Draining),
		placedEp("10.0.1.3", 3, "us", "us-a", endpoint.Unhealthy),
	)
	envoyInZone := &corev3.Node{Id: "envoy-a", UserAgentName: "envoy", Locality: &corev3.Locality{Region: "eu", Zone: "eu-a"}}
	for _, node := range []*corev3.Node{envoyNode, proxylessNode, envoyInZone, nodeIn("grpc-a", "eu", "eu-a"), nodeIn("grpc-us", "us", "")} {
		st, err := adsClient(t, s).StreamAggregatedResources(streamCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		listeners := unpack(t, sotwGet(t, st, node, resource.ListenerType).GetResources())
		clusters := unpack(t, sotwGet(t, st, node, resource.ClusterType).GetResources())
		loads := unpack(t, sotwGet(t, st, node, resource.EndpointType, clusters...).GetResources())
		routes := unpack(t, sotwGet(t, st, node, resource.RouteType, "web", "db").GetResources())
		wantClusters := []string{"db|tcp", "web|grpc", "web|http"}
		if !slices.Equal(clusters, wantClusters) || !slices.Equal(loads, wantClusters) || !slices.Equal(routes, []string{"db", "web"}) {
			t.Errorf("%s: clusters %v, load assignments %v, routes %v; want %v twice and [db web]", node.GetId(), clusters, loads, routes, wantClusters)
		}
		// Envoy takes API listeners only from its bootstrap: it gets none.
		if want := map[bool][]string{true: nil, false: {"db", "web"}}[node.GetUserAgentName() == "envoy"]; !slices.Equal(listeners, want) {
			t.Errorf("%s: listeners %v, want %v", node.GetId(), listeners, want)
		}
	}
}

// TestNACKWaitsForTheNextChange: a rejected response is counted and not sent again;
// the client gets the next change.
func TestNACKWaitsForTheNextChange(t *testing.T) {
	s := startServer(t)
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	st, err := adsClient(t, s).StreamAggregatedResources(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType, ResponseNonce: first.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected for the test"}}); err != nil {
		t.Fatal(err)
	}
	// Requests on a stream are handled in order: were the rejected clusters sent again,
	// they would come before the answer to this request.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.EndpointType, ResourceNames: []string{"web|grpc"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("after the NACK the server sent %s (err %v); want the load assignment asked for next, not the rejected clusters again", resp.GetTypeUrl(), err)
	}
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0), ep("prod", "db", "tcp", "10.0.0.2", 5432, 1, 0))
	next, err := st.Recv()
	for err == nil && next.GetTypeUrl() != resource.ClusterType {
		next, err = st.Recv() // the changed load assignment may come first
	}
	if err != nil {
		t.Fatal(err)
	}
	if next.GetVersionInfo() == first.GetVersionInfo() {
		t.Fatalf("the rejected version %s was pushed again", first.GetVersionInfo())
	}
	if got := unpack(t, next.GetResources()); !slices.Equal(got, []string{"db|tcp", "web|grpc"}) {
		t.Errorf("after the change the clusters are %v", got)
	}
	if n := metric(t, s, "switchboard_agent_xds_nacks_total", "Cluster"); n != 1 {
		t.Errorf("NACKs counted: %v, want 1", n)
	}
}

func TestDeltaFollowsChanges(t *testing.T) {
	s := startServer(t)
	a, b := ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0), ep("prod", "web", "grpc", "10.0.0.2", 80, 1, 0)
	update(t, s, a, b)
	st, err := adsClient(t, s).DeltaAggregatedResources(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	addrs := func(resp *discoveryv3.DeltaDiscoveryResponse) []string {
		var out []string
		for _, r := range resp.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := r.GetResource().UnmarshalTo(cla); err != nil {
				t.Fatal(err)
			}
			if err := cla.ValidateAll(); err != nil {
				t.Error(err)
			}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
		}
		return out
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.EndpointType,
		ResourceNamesSubscribe: []string{"web|grpc"}}); err != nil {
		t.Fatal(err)
	}
	if got := addrs(recv()); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("first delta response: %v", got)
	}
	if services, all := s.Demand(); all || !slices.Equal(services, []string{"web"}) {
		t.Errorf("Demand() = %v, %v; want [web], false", services, all)
	}
	update(t, s, b)
	if got := addrs(recv()); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("after a removal: %v", got)
	}
	update(t, s)
	if resp := recv(); !slices.Equal(resp.GetRemovedResources(), []string{"web|grpc"}) {
		t.Fatalf("after the last endpoint left: removed %v, resources %d", resp.GetRemovedResources(), len(resp.GetResources()))
	}
}

func TestDemandFollowsSubscriptions(t *testing.T) {
	s := startServer(t)
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	if services, all := s.Demand(); all || len(services) != 0 {
		t.Fatalf("no client: Demand() = %v, %v", services, all)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	st, err := adsClient(t, s).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sotwGet(t, st, envoyNode, resource.ClusterType) // CDS wildcard
	if _, all := s.Demand(); !all {
		t.Error("a CDS wildcard subscription does not demand every service")
	}
	if n := metric(t, s, "switchboard_agent_xds_connected_proxies", ""); n != 1 {
		t.Errorf("connected proxies = %v, want 1", n)
	}
	cancel()
	select {
	case <-s.DemandChanged():
	case <-time.After(wait):
	}
	deadline := time.Now().Add(wait)
	for _, all := s.Demand(); all; _, all = s.Demand() {
		if time.Now().After(deadline) {
			t.Fatal("demand still covers everything after the wildcard stream closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric reads one of the server's series through a registry, as /metrics would;
// typ selects the series with that type label, "" the unlabelled one.
func metric(t *testing.T, s *xds.Server, name, typ string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && (typ == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == typ) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{type=%q}", name, typ)
	return 0
}
