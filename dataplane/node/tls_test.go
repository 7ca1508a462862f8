package node_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// nodeTLS issues node id of group its certificate from ca, with its SPIFFE ID, and
// returns its server and client TLS.
func nodeTLS(t *testing.T, ca *tlstest.CA, group, id string) (server, client *tls.Config) {
	t.Helper()
	return svid(t, ca, nodeSVID(group, id))
}

// TestLinksOverMTLS: nodes whose certificates one CA signed link over mTLS and carry
// messages; a node whose certificate another CA signed cannot link, and says why —
// in its log, in its metrics, and in the link's status at the control plane.
func TestLinksOverMTLS(t *testing.T) {
	good, err := tlstest.NewCA("fabric")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("someone else")
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*tls.Config{}
	var logs syncbuf.Buffer
	f := startFabricWith(t, fabric.Options{
		Topology: "links:\n  - group: a\n    neighbors: [b, c]\n",
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Node: func(c *node.Config) {
			ca := good
			if c.Group == "c" {
				ca = other
			}
			c.ServerTLS, c.LinkTLS = nodeTLS(t, ca, c.Group, c.NodeID)
			clients[c.Group+"/"+c.NodeID] = c.LinkTLS
			c.HealthListen = "127.0.0.1:0"
			c.DialTimeout = time.Second
		},
	}, 0)
	ctx := deadline(t, 60*time.Second)
	if err := f.StartGroups(ctx, 1, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	dialTLS := func(id string) *client {
		cc, err := grpc.NewClient(f.Node(id).Addr(), grpc.WithTransportCredentials(credentials.NewTLS(clients[id])))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return &client{t: t, cc: cc, NodeServiceClient: nodev1.NewNodeServiceClient(cc)}
	}
	s := dialTLS("b/n1").subscribe("org/ns/svc")
	pub := dialTLS("a/n1")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if _, err := pub.publish(ctx, "org/ns/svc", "over mtls", false); err != nil {
		t.Fatal(err)
	}
	if m, err := s.next(ctx); err != nil || string(m.GetPayload()) != "over mtls" {
		t.Fatalf("over mTLS: %v %v", m, err)
	}

	// c's certificate is from another CA: the link between a and c fails its handshake.
	const why = "certificate signed by unknown authority"
	for {
		fails := 0.0
		for _, id := range []string{"a/n1", "c/n1"} {
			fails += sumOf(series(t, f.Node(id).HealthAddr(), "switchboard_node_link_connect_failures_total"))
		}
		if fails > 0 && strings.Contains(logs.String(), why) && linkFailedWith(ctx, t, f, "c", why) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no clear failure of the link to c (connect failures %v); log:\n%s", fails, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func sumOf(m map[string]float64) (s float64) {
	for _, v := range m {
		s += v
	}
	return s
}

// linkFailedWith reports whether the control plane recorded a link to or from group g
// as failed with a message containing why.
func linkFailedWith(ctx context.Context, t *testing.T, f *fabric.Fabric, g, why string) bool {
	t.Helper()
	links, err := f.ControlPlane().Store().ListLinks(ctx, store.LinkFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if (l.SourceGroup == g || l.DestGroup == g) && strings.Contains(l.StatusMessage, why) {
			return true
		}
	}
	return false
}

// TestLinkTransportsMix: nodes that dial on the framed transport and nodes that dial on
// gRPC (a group part way through an upgrade) link and peer with each other over mTLS,
// and a broadcast from any node reaches a subscriber at every node.
func TestLinkTransportsMix(t *testing.T) {
	ca, err := tlstest.NewCA("fabric")
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*tls.Config{}
	f := startFabricWith(t, fabric.Options{
		Topology: "links:\n  - group: a\n    neighbors: [b]\n",
		Node: func(c *node.Config) {
			c.ServerTLS, c.LinkTLS = nodeTLS(t, ca, c.Group, c.NodeID)
			clients[c.Group+"/"+c.NodeID] = c.LinkTLS
			c.LinkTransport = node.TransportFramed
			if c.Group+"/"+c.NodeID == "a/n2" || c.Group+"/"+c.NodeID == "b/n1" {
				c.LinkTransport = node.TransportGRPC
			}
		},
	}, 2, "a", "b")
	ctx := deadline(t, 60*time.Second)
	ids := []string{"a/n1", "a/n2", "b/n1", "b/n2"}
	subs, pubs := map[string]*sub{}, map[string]*client{}
	for _, id := range ids {
		pubs[id] = dialTLS(t, f.Node(id).Addr(), clients[id])
		subs[id] = pubs[id].subscribe("org/ns/mix")
	}
	waitAllReached(t, ctx, pubs["a/n1"], subs, "org/ns/mix")
	for _, from := range ids {
		if _, err := pubs[from].publish(ctx, "org/ns/mix", "from "+from, true); err != nil {
			t.Fatal(err)
		}
		for _, at := range ids {
			for {
				m, err := subs[at].next(ctx)
				if err != nil {
					t.Fatalf("the broadcast from %s never reached %s: %v", from, at, err)
				}
				if string(m.GetPayload()) == "from "+from {
					break
				}
			}
		}
	}
}
