package xds_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/switchboard-mesh/switchboard/agent/xds"
)

// TestClientsShowsOpenStreams: Clients lists each open stream with its node id,
// the types it subscribed to (wildcard or by name) and the version it was last
// sent of each; OnChange fires as the stream comes and goes, and a closed stream
// leaves the list.
func TestClientsShowsOpenStreams(t *testing.T) {
	s := startServer(t)
	var pokes atomic.Int64
	s.OnChange(func() { pokes.Add(1) })
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	if got := s.Clients(); len(got) != 0 {
		t.Fatalf("clients before any stream: %+v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := adsClient(t, s).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cds := sotwGet(t, st, envoyNode, resource.ClusterType)
	eds := sotwGet(t, st, envoyNode, resource.EndpointType, "web|grpc")

	var c xds.Client
	deadline := time.Now().Add(wait)
	for {
		// The ACKs sotwGet sent are handled asynchronously: wait until both
		// responses are recorded.
		if got := s.Clients(); len(got) == 1 && len(got[0].Types) == 2 && got[0].Types[1].Version != "" {
			c = got[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clients = %+v, want one stream with two types", s.Clients())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.Node != "envoy-1" || c.Since.IsZero() || c.Stream == 0 {
		t.Errorf("client = %+v", c)
	}
	want := []xds.Subscription{
		{Type: "Cluster", Wildcard: true, Version: cds.GetVersionInfo()},
		{Type: "ClusterLoadAssignment", Names: 1, Version: eds.GetVersionInfo()},
	}
	for i, w := range want {
		if c.Types[i] != w {
			t.Errorf("types[%d] = %+v, want %+v", i, c.Types[i], w)
		}
	}
	if pokes.Load() == 0 {
		t.Error("OnChange was not called while the stream subscribed")
	}

	before := pokes.Load()
	cancel()
	deadline = time.Now().Add(wait)
	for len(s.Clients()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the closed stream is still listed: %+v", s.Clients())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pokes.Load() == before {
		t.Error("OnChange was not called when the stream closed")
	}
}

// TestSotWAndDeltaStreamsAreTwoClients: go-control-plane numbers SotW and delta
// streams each from 1, so a SotW stream and a delta stream open together share an
// id. They are still two clients, each with its own subscriptions, and closing one
// keeps the other's demand.
func TestSotWAndDeltaStreamsAreTwoClients(t *testing.T) {
	s := startServer(t)
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0), ep("prod", "api", "grpc", "10.0.0.2", 80, 1, 0))
	c := adsClient(t, s)
	sotwCtx, closeSotW := context.WithCancel(streamCtx(t))
	defer closeSotW()
	sotw, err := c.StreamAggregatedResources(sotwCtx)
	if err != nil {
		t.Fatal(err)
	}
	sotwGet(t, sotw, envoyNode, resource.EndpointType, "web|grpc")
	delta, err := c.DeltaAggregatedResources(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "grpc-delta"}, TypeUrl: resource.EndpointType,
		ResourceNamesSubscribe: []string{"api|grpc"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Recv(); err != nil {
		t.Fatal(err)
	}

	var got []xds.Client
	waitFor(t, "two clients with their own subscriptions", func() bool {
		got = s.Clients()
		return len(got) == 2
	})
	sotwC, deltaC := got[0], got[1] // by node id: envoy-1, grpc-delta
	if sotwC.Node != "envoy-1" || sotwC.Delta || deltaC.Node != "grpc-delta" || !deltaC.Delta || sotwC.Stream != deltaC.Stream {
		t.Fatalf("clients = %+v, want envoy-1 over SotW and grpc-delta over delta, with the same stream number", got)
	}
	if len(sotwC.Types) != 1 || sotwC.Types[0].Names != 1 || len(deltaC.Types) != 1 || deltaC.Types[0].Names != 1 {
		t.Fatalf("subscriptions mixed up: %+v", got)
	}
	if services, all := s.Demand(); all || !slices.Equal(services, []string{"api", "web"}) {
		t.Fatalf("Demand() = %v, %v; want [api web]", services, all)
	}

	closeSotW()
	waitFor(t, "the delta stream's demand alone", func() bool {
		services, all := s.Demand()
		return !all && slices.Equal(services, []string{"api"})
	})
	if got := s.Clients(); len(got) != 1 || got[0].Node != "grpc-delta" || !got[0].Delta {
		t.Fatalf("after the SotW stream closed: clients = %+v", got)
	}
}

// waitFor polls cond until it holds or wait passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientsShowLocality: a stream lists the locality its node named.
func TestClientsShowLocality(t *testing.T) {
	s := startServer(t)
	update(t, s, ep("prod", "web", "grpc", "10.0.0.1", 80, 1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := adsClient(t, s).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sotwGet(t, st, nodeIn("grpc-eu", "eu", "eu-a"), resource.ClusterType)
	deadline := time.Now().Add(wait)
	for {
		if got := s.Clients(); len(got) == 1 && got[0].Region == "eu" && got[0].Zone == "eu-a" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("clients = %+v, want one in eu/eu-a", s.Clients())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
