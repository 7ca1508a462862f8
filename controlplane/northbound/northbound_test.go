package northbound

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

type fixture struct {
	client  controlplanev1.ControlPlaneServiceClient
	svc     *controlplane.Service
	streams *nodestream.Handler
	queued  chan controlplane.Result
}

// serve runs the API over a real service on a memory store, on a loopback socket.
func serve(t *testing.T, topology *config.Topology) *fixture {
	t.Helper()
	ctx := context.Background()
	svc, err := controlplane.New(ctx, controlplane.Options{Store: memory.New(), Topology: topology})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: svc, streams: nodestream.New(5 * time.Second), queued: make(chan controlplane.Result, 100)}
	gs := grpc.NewServer()
	controlplanev1.RegisterControlPlaneServiceServer(gs, New(svc, f.streams, func(r controlplane.Result) { f.queued <- r }, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.client = controlplanev1.NewControlPlaneServiceClient(conn)
	return f
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("error %v, want %s containing %q", err, code, msg)
	}
}

func register(t *testing.T, svc *controlplane.Service, group, id, external string) string {
	t.Helper()
	reg, err := svc.NodeRegistered(ctx(t), controlplane.Registration{
		NodeID: id, Group: group,
		ConnDetails: []store.ConnectionDetails{{Endpoint: id + ":46357", ExternalEndpoint: external}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg.NodeID
}

func TestAPIModeTopologyAndRoutes(t *testing.T) {
	f := serve(t, nil)
	c := ctx(t)
	if _, err := f.client.AddSegment(c, &controlplanev1.SegmentRequest{Name: "tenants"}); err != nil {
		t.Fatal(err)
	}
	<-f.queued
	if _, err := f.client.AddTopologyLink(c, &controlplanev1.TopologyLinkRequest{Segment: "tenants", GroupA: "cloud", GroupB: "edge"}); err != nil {
		t.Fatal(err)
	}
	<-f.queued
	segs, err := f.client.ListSegments(c, &controlplanev1.ListSegmentsRequest{})
	if err != nil || segs.GetConfigMode() || len(segs.GetSegments()) != 1 || len(segs.GetSegments()[0].GetLinks()) != 1 {
		t.Fatalf("ListSegments = %v, %v", segs, err)
	}
	_, err = f.client.AddTopologyLink(c, &controlplanev1.TopologyLinkRequest{Segment: "nope", GroupA: "cloud", GroupB: "edge"})
	wantCode(t, err, codes.NotFound, "nope")
	_, err = f.client.AddTopologyLink(c, &controlplanev1.TopologyLinkRequest{Segment: "tenants", GroupA: "cloud", GroupB: "bad group"})
	wantCode(t, err, codes.InvalidArgument, "bad group")

	cloud := register(t, f.svc, "cloud", "c1", "lb.cloud:443")
	edge := register(t, f.svc, "edge", "e1", "")
	links, err := f.client.ListLinks(c, &controlplanev1.ListLinksRequest{SourceNodeId: edge})
	if err != nil || len(links.GetLinks()) != 1 || links.GetLinks()[0].GetDestGroup() != "cloud" || links.GetLinks()[0].GetStatus() != "pending" {
		t.Fatalf("ListLinks = %v, %v", links, err)
	}
	nodes, err := f.client.ListNodes(c, &controlplanev1.ListNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 2 || nodes.GetNodes()[0].GetId() != cloud {
		t.Fatalf("ListNodes = %v, %v", nodes, err)
	}

	if _, err := f.client.AddRoute(c, &controlplanev1.RouteRequest{Name: "org/ns/svc", DestNodeId: cloud}); err != nil {
		t.Fatal(err)
	}
	if r := <-f.queued; len(r.RouteNodes) == 0 {
		t.Fatalf("AddRoute queued no route reconciliation: %+v", r)
	}
	routes, err := f.client.ListRoutes(c, &controlplanev1.ListRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var template, expansion bool
	for _, r := range routes.GetRoutes() {
		template = template || (r.GetSourceNodeId() == "*" && r.GetStatus() == "applied")
		expansion = expansion || (r.GetSourceNodeId() == edge && r.GetStatus() == "pending" && r.GetName() == "org/ns/svc")
	}
	if !template || !expansion {
		t.Fatalf("routes %v: want an Applied template and a Pending expansion on %s", routes, edge)
	}
	only, err := f.client.ListRoutes(c, &controlplanev1.ListRoutesRequest{SourceNodeId: edge})
	if err != nil || len(only.GetRoutes()) != 1 {
		t.Fatalf("ListRoutes filtered by source = %v, %v", only, err)
	}
	_, err = f.client.AddRoute(c, &controlplanev1.RouteRequest{Name: "org/ns", DestNodeId: cloud})
	wantCode(t, err, codes.InvalidArgument, "org/ns")
	_, err = f.client.AddRoute(c, &controlplanev1.RouteRequest{Name: "org/ns/svc"})
	wantCode(t, err, codes.InvalidArgument, "dest_node_id")
	if _, err := f.client.DeleteRoute(c, &controlplanev1.RouteRequest{Name: "org/ns/svc", DestNodeId: cloud}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.RemoveSegment(c, &controlplanev1.SegmentRequest{Name: "tenants"}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigModeRefusesTopologyMutations(t *testing.T) {
	f := serve(t, &config.Topology{Links: []config.Link{{Group: "cloud", Neighbors: []string{"*"}}}})
	c := ctx(t)
	_, err := f.client.AddSegment(c, &controlplanev1.SegmentRequest{Name: "x"})
	wantCode(t, err, codes.FailedPrecondition, "config")
	_, err = f.client.RemoveTopologyLink(c, &controlplanev1.TopologyLinkRequest{Segment: "x", GroupA: "a", GroupB: "b"})
	wantCode(t, err, codes.FailedPrecondition, "config")
	segs, err := f.client.ListSegments(c, &controlplanev1.ListSegmentsRequest{})
	if err != nil || !segs.GetConfigMode() {
		t.Fatalf("ListSegments in config mode = %v, %v", segs, err)
	}
}

func TestNodeQueriesGoToTheNode(t *testing.T) {
	f := serve(t, nil)
	c := ctx(t)
	_, err := f.client.ListNodeConnections(c, &controlplanev1.NodeRequest{NodeId: "g/absent"})
	wantCode(t, err, codes.NotFound, "not connected")
	_, err = f.client.ListNodeSubscriptions(c, &controlplanev1.NodeRequest{})
	wantCode(t, err, codes.InvalidArgument, "node_id")

	// A node that answers list requests over its stream.
	var stream *nodestream.Stream
	stream = f.streams.Add("g/n1", func(m *controllerv1.ControlMessage) error {
		reply := &controllerv1.ControlMessage{ReplyTo: m.GetMessageId()}
		switch {
		case m.GetConnectionListRequest() != nil:
			reply.Payload = &controllerv1.ControlMessage_ConnectionListResponse{ConnectionListResponse: &controllerv1.ConnectionListResponse{
				Entries: []*controllerv1.ConnectionEntry{{LinkId: "l1", Endpoint: "lb:443", ConnId: 7}}}}
		case m.GetSubscriptionListRequest() != nil:
			reply.Payload = &controllerv1.ControlMessage_SubscriptionListResponse{SubscriptionListResponse: &controllerv1.SubscriptionListResponse{
				Subscriptions: []*controllerv1.Subscription{{Component_0: "a", Component_1: "b", Component_2: "c", LinkId: "l1"}}}}
		}
		go stream.Deliver(reply)
		return nil
	})
	conns, err := f.client.ListNodeConnections(c, &controlplanev1.NodeRequest{NodeId: "g/n1"})
	if err != nil || len(conns.GetEntries()) != 1 || conns.GetEntries()[0].GetConnId() != 7 {
		t.Fatalf("ListNodeConnections = %v, %v", conns, err)
	}
	subs, err := f.client.ListNodeSubscriptions(c, &controlplanev1.NodeRequest{NodeId: "g/n1"})
	if err != nil || len(subs.GetSubscriptions()) != 1 || subs.GetSubscriptions()[0].GetComponent_2() != "c" {
		t.Fatalf("ListNodeSubscriptions = %v, %v", subs, err)
	}
}
