package northbound

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// TestListFiltersByStatus: a status list keeps those states only, none keeps all,
// and an unknown state is InvalidArgument naming it.
func TestListFiltersByStatus(t *testing.T) {
	f := serve(t, nil)
	c := ctx(t)
	if _, err := f.client.AddTopologyLink(c, &controlplanev1.TopologyLinkRequest{GroupA: "cloud", GroupB: "edge"}); err != nil {
		t.Fatal(err)
	}
	register(t, f.svc, "cloud", "c1", "lb.cloud:443")
	edge := register(t, f.svc, "edge", "e1", "")
	count := func(statuses ...string) int {
		t.Helper()
		links, err := f.client.ListLinks(c, &controlplanev1.ListLinksRequest{Statuses: statuses})
		if err != nil {
			t.Fatal(err)
		}
		return len(links.GetLinks())
	}
	if all, pending, applied := count(), count("pending"), count("applied"); all != 1 || pending != 1 || applied != 0 {
		t.Fatalf("links: all %d, pending %d, applied %d; want 1, 1, 0", all, pending, applied)
	}
	if n := count("applied", "pending"); n != 1 {
		t.Fatalf("links applied or pending: %d, want 1", n)
	}
	_, err := f.client.ListLinks(c, &controlplanev1.ListLinksRequest{Statuses: []string{"bogus"}})
	wantCode(t, err, codes.InvalidArgument, "bogus")

	if _, err := f.client.AddRoute(c, &controlplanev1.RouteRequest{Name: "org/ns/svc", DestNodeId: "cloud/c1"}); err != nil {
		t.Fatal(err)
	}
	applied, err := f.client.ListRoutes(c, &controlplanev1.ListRoutesRequest{Statuses: []string{"applied"}})
	if err != nil || len(applied.GetRoutes()) != 1 || applied.GetRoutes()[0].GetSourceNodeId() != "*" {
		t.Fatalf("applied routes = %v, %v; want the template alone", applied, err)
	}
	pending, err := f.client.ListRoutes(c, &controlplanev1.ListRoutesRequest{Statuses: []string{"pending"}})
	if err != nil || len(pending.GetRoutes()) != 1 || pending.GetRoutes()[0].GetSourceNodeId() != edge {
		t.Fatalf("pending routes = %v, %v; want the expansion on %s", pending, err, edge)
	}
	_, err = f.client.ListRoutes(c, &controlplanev1.ListRoutesRequest{Statuses: []string{"connecting"}})
	wantCode(t, err, codes.InvalidArgument, "connecting")
}

// TestDefaultSegmentAndResolved: a topology link without a segment lands in
// "default"; resolved segments expand "*" over the registered groups.
func TestDefaultSegmentAndResolved(t *testing.T) {
	f := serve(t, nil)
	c := ctx(t)
	if _, err := f.client.AddTopologyLink(c, &controlplanev1.TopologyLinkRequest{GroupA: "cloud", GroupB: "*"}); err != nil {
		t.Fatal(err)
	}
	register(t, f.svc, "cloud", "c1", "lb.cloud:443")
	register(t, f.svc, "edge", "e1", "")
	register(t, f.svc, "lab", "l1", "")
	stored, err := f.client.ListSegments(c, &controlplanev1.ListSegmentsRequest{})
	if err != nil || len(stored.GetSegments()) != 1 || stored.GetSegments()[0].GetName() != "default" ||
		stored.GetSegments()[0].GetLinks()[0].GetGroupB() != "*" && stored.GetSegments()[0].GetLinks()[0].GetGroupA() != "*" {
		t.Fatalf("stored segments = %v, %v; want default with cloud <-> *", stored, err)
	}
	resolved, err := f.client.ListSegments(c, &controlplanev1.ListSegmentsRequest{Resolved: true})
	if err != nil || len(resolved.GetSegments()) != 1 {
		t.Fatalf("resolved segments = %v, %v", resolved, err)
	}
	var pairs []string
	for _, l := range resolved.GetSegments()[0].GetLinks() {
		pairs = append(pairs, l.GetGroupA()+"-"+l.GetGroupB())
	}
	if len(pairs) != 2 || pairs[0] != "cloud-edge" || pairs[1] != "cloud-lab" {
		t.Fatalf("resolved pairs = %v, want [cloud-edge cloud-lab]", pairs)
	}
	if _, err := f.client.RemoveTopologyLink(c, &controlplanev1.TopologyLinkRequest{GroupA: "*", GroupB: "cloud"}); err != nil {
		t.Fatal(err)
	}
}

// TestListGroups: groups of the registered nodes, sorted, each with its nodes; no
// secret source without shared-secret auth; the secret methods refuse.
func TestListGroups(t *testing.T) {
	f := serve(t, nil)
	c := ctx(t)
	register(t, f.svc, "edge", "e2", "")
	register(t, f.svc, "cloud", "c1", "lb.cloud:443")
	register(t, f.svc, "edge", "e1", "")
	resp, err := f.client.ListGroups(c, &controlplanev1.ListGroupsRequest{})
	if err != nil || len(resp.GetGroups()) != 2 {
		t.Fatalf("ListGroups = %v, %v", resp, err)
	}
	cloud, edge := resp.GetGroups()[0], resp.GetGroups()[1]
	if cloud.GetName() != "cloud" || len(cloud.GetNodes()) != 1 || edge.GetName() != "edge" || len(edge.GetNodes()) != 2 ||
		edge.GetNodes()[0].GetId() != "edge/e1" || edge.GetSecretSource() != "" {
		t.Fatalf("groups = %v", resp.GetGroups())
	}
	_, err = f.client.AddGroupSecret(c, &controlplanev1.GroupSecretRequest{Group: "edge", Secret: "0123456789abcdef0123456789abcdef"})
	wantCode(t, err, codes.FailedPrecondition, "shared_secret")
}

// TestSecretsOnlyOverPrivateChannels: a secret is accepted over TLS or from
// loopback, refused from a remote plaintext peer naming the address.
func TestSecretsOnlyOverPrivateChannels(t *testing.T) {
	base := context.Background()
	remote := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5000}
	for _, tc := range []struct {
		name string
		p    *peer.Peer
		ok   bool
	}{
		{"loopback v4", &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}}, true},
		{"loopback v6", &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}}, true},
		{"remote over TLS", &peer.Peer{Addr: remote, AuthInfo: credentials.TLSInfo{}}, true},
		{"remote plaintext", &peer.Peer{Addr: remote}, false},
	} {
		err := checkPrivateChannel(peer.NewContext(base, tc.p))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok {
			wantCode(t, err, codes.FailedPrecondition, "10.1.2.3")
		}
	}
	wantCode(t, checkPrivateChannel(base), codes.FailedPrecondition, "unknown peer")
}
