package node_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// TestLocalClientsOnlyOfTheNodesGroup: with mTLS, the client API (publish, subscribe)
// serves only certificates of the node's own group. Another group's node certificate,
// which the listener accepts for links, may not subscribe there (the node would announce
// the name and draw the group's traffic to it) nor publish with the node's origin.
func TestLocalClientsOnlyOfTheNodesGroup(t *testing.T) {
	var logs syncbuf.Buffer
	f, ca := mtlsFabric(t, "", slog.New(slog.NewTextHandler(&logs, nil)), 1, "cloud")
	ctx := deadline(t, 30*time.Second)
	cloud := f.Node("cloud/n1")
	name, err := node.ParseName("org/ns/svc")
	if err != nil {
		t.Fatal(err)
	}
	for _, spiffeID := range []string{nodeSVID("edge-a", "e1"), "spiffe://edge-a/app/web", ""} {
		_, conf := svid(t, ca, spiffeID)
		c := dialTLS(t, cloud.Addr(), conf)
		_, err := c.publish(ctx, "org/ns/svc", "from elsewhere", false)
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("publish with certificate %q: %v, want PERMISSION_DENIED", spiffeID, err)
		}
		st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: node.NameProto(name)})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("subscribe with certificate %q: %v, want PERMISSION_DENIED", spiffeID, err)
		}
	}
	// An application of the node's own group is served.
	_, own := svid(t, ca, "spiffe://cloud/app/web")
	c := dialTLS(t, cloud.Addr(), own)
	s := c.subscribe("org/ns/svc")
	if _, err := c.publish(ctx, "org/ns/svc", "from cloud", false); err != nil {
		t.Fatalf("publish from cloud's own application: %v", err)
	}
	if m, err := s.next(ctx); err != nil || string(m.GetPayload()) != "from cloud" {
		t.Fatalf("subscriber of cloud got %v, %v", m, err)
	}
	denied := series(t, cloud.HealthAddr(), "switchboard_node_peer_identity_denied_total")
	if denied[`reason="client_group"`] != 4 || denied[`reason="no_identity"`] != 2 {
		t.Errorf("peer_identity_denied_total = %v, want 4 client_group and 2 no_identity", denied)
	}
	if !strings.Contains(logs.String(), "client refused") {
		t.Errorf("no warning for the refused clients; log:\n%s", logs.String())
	}
}

// TestFramedClientsOnlyOfTheNodesGroup: the client API on the framed transport admits
// the same certificates as on gRPC.
func TestFramedClientsOnlyOfTheNodesGroup(t *testing.T) {
	f, ca := mtlsFabric(t, "", testLogger(), 1, "cloud")
	ctx := deadline(t, 30*time.Second)
	addr := f.Node("cloud/n1").Addr()
	framedTLS := func(spiffeID string) *client {
		_, conf := svid(t, ca, spiffeID)
		return &client{t: t, NodeServiceClient: nodev1.NewNodeServiceClient(node.NewFramedClient(addr, node.FramedOptions{TLS: conf}))}
	}
	for _, spiffeID := range []string{nodeSVID("edge-a", "e1"), "spiffe://edge-a/app/web", ""} {
		c := framedTLS(spiffeID)
		if _, err := c.publish(ctx, "org/ns/svc", "from elsewhere", false); status.Code(err) != codes.PermissionDenied {
			t.Errorf("framed publish with certificate %q: %v, want PERMISSION_DENIED", spiffeID, err)
		}
		_, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: nameOf(t, "org/ns/svc")})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("framed subscribe with certificate %q: %v, want PERMISSION_DENIED", spiffeID, err)
		}
	}
	c := framedTLS("spiffe://cloud/app/web")
	s := c.subscribe("org/ns/svc")
	if _, err := c.publish(ctx, "org/ns/svc", "from cloud", false); err != nil {
		t.Fatalf("framed publish from cloud's own application: %v", err)
	}
	if m, err := s.next(ctx); err != nil || string(m.GetPayload()) != "from cloud" {
		t.Fatalf("framed subscriber of cloud got %v, %v", m, err)
	}
}
