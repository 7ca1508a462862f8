package xds_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func placedEp(addr string, priority int, region, zone string, h endpoint.Health) endpoint.Endpoint {
	e := ep("prod", "web", "grpc", addr, 80, priority, 0)
	e.Region, e.Zone, e.Health = region, zone, h
	return e
}

// zoneFleet has an endpoint in each of two zones of one region and one in another
// region, in every health state.
var zoneFleet = []endpoint.Endpoint{
	placedEp("10.0.0.1", 1, "eu", "eu-a", endpoint.Healthy),
	placedEp("10.0.0.2", 1, "eu", "eu-b", endpoint.Draining),
	placedEp("10.0.0.3", 1, "us", "us-a", endpoint.Unhealthy),
	placedEp("10.0.0.4", 2, "eu", "eu-b", endpoint.Healthy),
}

func nodeIn(id, region, zone string) *corev3.Node {
	return &corev3.Node{Id: id, UserAgentName: "gRPC Go", Locality: &corev3.Locality{Region: region, Zone: zone}}
}

// edsPriorities asks for web|grpc on a new stream as node and returns the response's
// version and each endpoint's "address priority status".
func edsPriorities(t *testing.T, ctx context.Context, client discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node) (string, []string) {
	t.Helper()
	st, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp := sotwGet(t, st, node, resource.EndpointType, "web|grpc")
	unpack(t, resp.GetResources()) // validates
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, fmt.Sprintf("%s %d %s", e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(), l.GetPriority(), e.GetHealthStatus()))
		}
	}
	slices.Sort(out)
	return resp.GetVersionInfo(), out
}

// TestEachClientLocalityGetsItsOwnPriorities: over ADS, clients that gave a locality
// get priorities for it, clients in one locality share a snapshot (same version),
// clients without a locality get today's priorities, and a locality's snapshot goes
// with its last stream.
func TestEachClientLocalityGetsItsOwnPriorities(t *testing.T) {
	s := startServer(t)
	update(t, s, zoneFleet...)
	client := adsClient(t, s)
	ctx, cancel := context.WithCancel(streamCtx(t))

	vA1, gotA := edsPriorities(t, ctx, client, nodeIn("a-1", "eu", "eu-a"))
	vA2, gotA2 := edsPriorities(t, ctx, client, nodeIn("a-2", "eu", "eu-a"))
	vB, gotB := edsPriorities(t, ctx, client, nodeIn("b-1", "eu", "eu-b"))
	vNone, gotNone := edsPriorities(t, ctx, client, proxylessNode)

	wantA := []string{"10.0.0.1 0 HEALTHY", "10.0.0.2 1 DRAINING", "10.0.0.3 2 UNHEALTHY", "10.0.0.4 3 HEALTHY"}
	wantB := []string{"10.0.0.1 1 HEALTHY", "10.0.0.2 0 DRAINING", "10.0.0.3 2 UNHEALTHY", "10.0.0.4 3 HEALTHY"}
	wantNone := []string{"10.0.0.1 0 HEALTHY", "10.0.0.2 0 DRAINING", "10.0.0.3 0 UNHEALTHY", "10.0.0.4 1 HEALTHY"}
	for _, c := range []struct {
		who       string
		got, want []string
	}{{"eu-a", gotA, wantA}, {"eu-a again", gotA2, wantA}, {"eu-b", gotB, wantB}, {"no locality", gotNone, wantNone}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("client in %s: endpoints\n got %q\nwant %q", c.who, c.got, c.want)
		}
	}
	if vA1 != vA2 || vA1 == vB || vA1 == vNone {
		t.Errorf("versions: eu-a %s and %s, eu-b %s, none %s; want eu-a's equal and the others different", vA1, vA2, vB, vNone)
	}
	// The two views without a locality, and eu-a and eu-b.
	if n := metric(t, s, "switchboard_agent_xds_snapshots", ""); n != 4 {
		t.Errorf("snapshots kept: %v, want 4", n)
	}
	cancel()
	waitFor(t, "locality snapshots dropped after their streams closed", func() bool {
		return metric(t, s, "switchboard_agent_xds_snapshots", "") == 2
	})
	// A locality seen again gets a snapshot again, from the current state.
	update(t, s, zoneFleet[0])
	_, got := edsPriorities(t, streamCtx(t), client, nodeIn("a-3", "eu", "eu-a"))
	if want := []string{"10.0.0.1 0 HEALTHY"}; !slices.Equal(got, want) {
		t.Errorf("eu-a after reconnecting: %q, want %q", got, want)
	}
}

// TestLocalityChangeMidStreamEndsTheStream: a stream whose node names another
// locality mid-stream is ended (Unavailable), since its open watches of the other
// types belong to the old locality's snapshot; the client reconnects with its new
// node and gets every type again, for its new locality. Both for SotW and delta.
func TestLocalityChangeMidStreamEndsTheStream(t *testing.T) {
	l1, l2 := nodeIn("c-1", "eu", "eu-a"), nodeIn("c-1", "eu", "eu-b")
	// ended waits for the stream's end, failing the test if responses keep coming or
	// it stays open.
	ended := func(t *testing.T, recv func() (string, error)) {
		t.Helper()
		type got struct {
			typ string
			err error
		}
		recvd := make(chan got, 16)
		go func() {
			for {
				typ, err := recv()
				recvd <- got{typ, err}
				if err != nil {
					return
				}
			}
		}()
		deadline := time.After(3 * time.Second)
		for {
			select {
			case r := <-recvd:
				if r.err == nil {
					t.Logf("pushed %s after the locality change", r.typ)
					continue
				}
				if status.Code(r.err) != codes.Unavailable {
					t.Fatalf("stream ended with %v, want Unavailable", r.err)
				}
				return
			case <-deadline:
				t.Fatal("stream still open after its node named another locality: its CDS watch under the old locality is lost")
			}
		}
	}
	// reconnected checks that a new stream in l2 gets clusters and l2's priorities,
	// and that the old locality's snapshot went with the stream.
	reconnected := func(t *testing.T, s *xds.Server) {
		t.Helper()
		st, err := adsClient(t, s).StreamAggregatedResources(streamCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := unpack(t, sotwGet(t, st, l2, resource.ClusterType).GetResources()); !slices.Equal(got, []string{"web|grpc"}) {
			t.Errorf("clusters after reconnecting: %v", got)
		}
		_, got := edsPriorities(t, streamCtx(t), adsClient(t, s), l2)
		if want := []string{"10.0.0.1 1 HEALTHY", "10.0.0.2 0 DRAINING", "10.0.0.3 2 UNHEALTHY", "10.0.0.4 3 HEALTHY"}; !slices.Equal(got, want) {
			t.Errorf("eu-b after reconnecting: %q, want %q", got, want)
		}
		waitFor(t, "eu-a's snapshot dropped with its stream, eu-b's kept", func() bool {
			return metric(t, s, "switchboard_agent_xds_snapshots", "") == 3
		})
	}

	t.Run("sotw", func(t *testing.T) {
		s := startServer(t)
		update(t, s, zoneFleet...)
		st, err := adsClient(t, s).StreamAggregatedResources(streamCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		sotwGet(t, st, l1, resource.ClusterType)
		eds := sotwGet(t, st, l1, resource.EndpointType, "web|grpc")
		// The same ACK again, now naming another locality.
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: l2, TypeUrl: resource.EndpointType, ResourceNames: []string{"web|grpc"},
			VersionInfo: eds.GetVersionInfo(), ResponseNonce: eds.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		// A change of every type: with the stream still open, its CDS watch would
		// never see it.
		update(t, s, append(slices.Clone(zoneFleet), ep("prod", "db", "tcp", "10.0.0.9", 5432, 1, 0))...)
		ended(t, func() (string, error) { r, err := st.Recv(); return r.GetTypeUrl(), err })
		update(t, s, zoneFleet...)
		reconnected(t, s)
	})

	t.Run("delta", func(t *testing.T) {
		s := startServer(t)
		update(t, s, zoneFleet...)
		st, err := adsClient(t, s).DeltaAggregatedResources(streamCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []string{resource.ClusterType, resource.EndpointType} {
			req := &discoveryv3.DeltaDiscoveryRequest{Node: l1, TypeUrl: typ}
			if typ == resource.EndpointType {
				req.ResourceNamesSubscribe = []string{"web|grpc"}
			}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil || resp.GetTypeUrl() != typ {
				t.Fatalf("waiting for %s: got %s, %v", typ, resp.GetTypeUrl(), err)
			}
			if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: l2, TypeUrl: resource.EndpointType,
			ResourceNamesSubscribe: []string{"web|grpc"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		update(t, s, append(slices.Clone(zoneFleet), ep("prod", "db", "tcp", "10.0.0.9", 5432, 1, 0))...)
		ended(t, func() (string, error) { r, err := st.Recv(); return r.GetTypeUrl(), err })
		update(t, s, zoneFleet...)
		reconnected(t, s)
	})
}
