package node_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/endpoint"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// svid issues a certificate for spiffeID ("" for none) from ca and returns its server
// and client TLS.
func svid(t *testing.T, ca *tlstest.CA, spiffeID string) (server, client *tls.Config) {
	t.Helper()
	leaf, err := ca.Issue(spiffeID, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), "leaf", leaf)
	if err != nil {
		t.Fatal(err)
	}
	if server, err = tlsutil.ServerConfig(files, ""); err != nil {
		t.Fatal(err)
	}
	if client, err = tlsutil.ClientConfig(files, "", ""); err != nil {
		t.Fatal(err)
	}
	return server, client
}

// nodeSVID is the certificate of node id of group, under the default identity mapping.
func nodeSVID(group, id string) string { return "spiffe://" + group + "/node/" + id }

// mtlsFabric runs a fabric whose nodes hold certificates of one CA carrying their
// SPIFFE IDs; it returns the CA, to issue the test's own peers from.
func mtlsFabric(t *testing.T, topology string, logger *slog.Logger, perGroup int, groups ...string) (*fabric.Fabric, *tlstest.CA) {
	t.Helper()
	ca, err := tlstest.NewCA("fabric")
	if err != nil {
		t.Fatal(err)
	}
	f := startFabricWith(t, fabric.Options{Topology: topology, Logger: logger, Node: func(c *node.Config) {
		c.ServerTLS, c.LinkTLS = svid(t, ca, nodeSVID(c.Group, c.NodeID))
		c.HealthListen = "127.0.0.1:0"
	}}, perGroup, groups...)
	return f, ca
}

// dialTLS is a client of the node at addr over TLS.
func dialTLS(t *testing.T, addr string, conf *tls.Config) *client {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &client{t: t, cc: cc, NodeServiceClient: nodev1.NewNodeServiceClient(cc)}
}

// rawDialer opens a raw link stream on one of the node's transports.
type rawDialer func(t *testing.T, ctx context.Context, addr string, client *tls.Config, md ...string) nodev1.LinkService_LinkClient

// onTransports runs test with raw streams on the gRPC transport and on the framed one:
// a node checks who dials it the same way on both.
func onTransports(t *testing.T, test func(*testing.T, rawDialer)) {
	t.Run("grpc", func(t *testing.T) { test(t, rawStream) })
	t.Run("framed", func(t *testing.T) { test(t, rawFramed) })
}

// rawFramed opens a link stream to addr on the framed transport, as rawStream does on
// gRPC; a refusal is the error of its first Recv.
func rawFramed(t *testing.T, ctx context.Context, addr string, client *tls.Config, md ...string) nodev1.LinkService_LinkClient {
	t.Helper()
	st := node.RawFramed(ctx, addr, client, metadata.Pairs(md...))
	t.Cleanup(func() { _ = st.CloseSend() })
	return st
}

// rawStream opens a LinkService stream to addr as a node would, with metadata md
// (key, value, ...), over TLS when client is not nil. It ends with the test.
func rawStream(t *testing.T, ctx context.Context, addr string, client *tls.Config, md ...string) nodev1.LinkService_LinkClient {
	t.Helper()
	c := dial(t, addr)
	if client != nil {
		c = dialTLS(t, addr, client)
	}
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.Pairs(md...)))
	t.Cleanup(cancel)
	st, err := nodev1.NewLinkServiceClient(c.cc).Link(sctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// expectRefused fails the test unless the node ends st with PERMISSION_DENIED before
// sending it anything; otherwise it reports what the node sent within 2 s.
func expectRefused(t *testing.T, st nodev1.LinkService_LinkClient, what string) {
	t.Helper()
	frames := make(chan *nodev1.LinkFrame, 100)
	end := make(chan error, 1)
	go func() {
		for {
			f, err := st.Recv()
			if err != nil {
				end <- err
				return
			}
			frames <- f
		}
	}()
	var got []string
	timeout := time.After(2 * time.Second)
	for {
		select {
		case f := <-frames:
			got = append(got, describe(f))
			continue
		case err := <-end:
			if status.Code(err) != codes.PermissionDenied || len(got) > 0 {
				t.Errorf("%s: got %v, then %v; want PERMISSION_DENIED and nothing else", what, got, err)
			}
		case <-timeout:
			t.Errorf("%s: accepted, and got %v; want PERMISSION_DENIED and nothing else", what, got)
		}
		return
	}
}

// describe summarises a frame a node sent.
func describe(f *nodev1.LinkFrame) string {
	if b := f.GetBatch(); b != nil {
		var ps []string
		for _, m := range b.GetMessages() {
			ps = append(ps, string(m.GetPayload()))
		}
		return "messages " + strings.Join(ps, ",")
	}
	return fmt.Sprintf("%T", f.GetFrame())
}

// offer asks the node at the other end of st for name, as a peer with a local
// subscriber does. The stream may be refused already: errors are the reads' to tell.
func offer(st nodev1.LinkService_LinkClient, id uint64, name string) {
	_ = st.Send(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Subscribe{Subscribe: &nodev1.Interest{
		Id: id, Name: &nodev1.Name{Org: "org", Namespace: "ns", Service: name}, Local: true}}})
}

// expectAccepted fails the test unless the node answers st's opening with its header.
func expectAccepted(t *testing.T, st nodev1.LinkService_LinkClient, what string) {
	t.Helper()
	if md, err := st.Header(); md == nil || err != nil {
		_, rerr := st.Recv()
		t.Fatalf("%s: refused: %v %v", what, err, rerr)
	}
}

func send(t *testing.T, st nodev1.LinkService_LinkClient, seq uint64, msgs ...*nodev1.Message) {
	t.Helper()
	if err := st.Send(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: seq, Messages: msgs}}}); err != nil {
		t.Fatal(err)
	}
}

// waitBatchAck reads st until the node acknowledges batch seq: it is done with every
// message in it.
func waitBatchAck(t *testing.T, st nodev1.LinkService_LinkClient, seq uint64) {
	t.Helper()
	for {
		f, err := st.Recv()
		if err != nil {
			t.Fatalf("no ack of batch %d: %v", seq, err)
		}
		if a := f.GetBatchAck(); a != nil && a.GetSeq() >= seq {
			return
		}
	}
}

func message(payload, origin string, ttl uint32) *nodev1.Message {
	return &nodev1.Message{Name: &nodev1.Name{Org: "org", Namespace: "ns", Service: "svc"}, Payload: []byte(payload), Origin: origin, Ttl: ttl, Broadcast: true}
}

// payloads drains what s got within d.
func payloads(s *sub, d time.Duration) []string {
	var out []string
	for m := s.quiet(d); m != nil; m = s.quiet(d) {
		out = append(out, string(m.GetPayload())+"@"+m.GetOrigin())
	}
	return out
}

// TestPeerIdentityComesFromTheCertificate: with mTLS a peer is who its certificate
// says. A node of edge-a, whose certificate is valid (same CA), asks to peer with
// group cloud by its metadata and offers a name cloud broadcasts to: refused, it gets
// nothing, and the refusal is logged and counted. So is a certificate without a SPIFFE
// ID. A node whose certificate is of group cloud peers, and gets the broadcast.
func TestPeerIdentityComesFromTheCertificate(t *testing.T) {
	onTransports(t, testPeerIdentityComesFromTheCertificate)
}

func testPeerIdentityComesFromTheCertificate(t *testing.T, raw rawDialer) {
	var logs syncbuf.Buffer
	f, ca := mtlsFabric(t, "", slog.New(slog.NewTextHandler(&logs, nil)), 1, "cloud")
	ctx := deadline(t, 30*time.Second)
	cloud := f.Node("cloud/n1")
	_, local := svid(t, ca, "spiffe://cloud/client/app")
	pub := dialTLS(t, cloud.Addr(), local)
	pub.subscribe("org/ns/svc") // so that publishing the name always finds a subscriber
	// join opens a peering to cloud/n1 with certificate spiffeID, offers org/ns/svc and
	// has cloud/n1 broadcast to it.
	join := func(spiffeID string, md ...string) nodev1.LinkService_LinkClient {
		_, conf := svid(t, ca, spiffeID)
		st := raw(t, ctx, cloud.Addr(), conf, md...)
		offer(st, 1, "svc")
		time.Sleep(200 * time.Millisecond) // the offer is in, if the peering was accepted
		if _, err := pub.publish(ctx, "org/ns/svc", "for cloud only", true); err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := join(nodeSVID("edge-a", "x"), "sb-node", "cloud/x", "sb-group", "cloud")
	expectRefused(t, st, "edge-a's certificate claiming group cloud")
	st = join(nodeSVID("edge-a", "y"), "sb-node", "edge-a/y", "sb-group", "cloud")
	expectRefused(t, st, "edge-a's certificate naming itself but claiming group cloud")
	st = join("", "sb-node", "cloud/z", "sb-group", "cloud")
	expectRefused(t, st, "a certificate without a SPIFFE ID")

	st = join(nodeSVID("cloud", "n9"), "sb-node", "cloud/n9", "sb-group", "cloud")
	for {
		fr, err := st.Recv()
		if err != nil {
			t.Fatalf("cloud/n9, a node of cloud, got no broadcast: %v", err)
		}
		if describe(fr) == "messages for cloud only" {
			break
		}
	}

	denied := series(t, cloud.HealthAddr(), "switchboard_node_peer_identity_denied_total")
	if denied[`reason="metadata_mismatch"`] != 2 || denied[`reason="no_identity"`] != 1 {
		t.Errorf("peer_identity_denied_total = %v, want 2 metadata_mismatch and 1 no_identity", denied)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "spiffe://edge-a/node/x") {
		t.Errorf("no warning naming the refused identity; log:\n%s", logs.String())
	}
}

// TestLinkIDAcceptedOnlyFromItsGroup: a link id is the control plane's link from one
// group to another. Another group's node that presents it — to the node that accepted
// the link, or to the node that dials it — is refused, as is a node of the accepting
// node's own group; a sibling of the dialer (the control plane moves a link to one
// when its gateway fails) is accepted.
func TestLinkIDAcceptedOnlyFromItsGroup(t *testing.T) {
	onTransports(t, testLinkIDAcceptedOnlyFromItsGroup)
}

func testLinkIDAcceptedOnlyFromItsGroup(t *testing.T, raw rawDialer) {
	f, ca := mtlsFabric(t, pairAB, nil, 1, "a", "b")
	ctx := deadline(t, 30*time.Second)
	link := linkOf(t, ctx, f.Node("a/n1"))
	dialer, acceptor := f.Node("a/n1"), f.Node("b/n1")
	if link.Inbound {
		dialer, acceptor = acceptor, dialer
	}
	_, other := svid(t, ca, nodeSVID("c", "x"))
	st := raw(t, ctx, acceptor.Addr(), other, "sb-node", "c/x", "sb-group", "c", "sb-link-id", link.LinkID)
	expectRefused(t, st, "group c presenting the link "+dialer.Group+" dials")
	st = raw(t, ctx, dialer.Addr(), other, "sb-node", "c/x", "sb-group", "c", "sb-link-id", link.LinkID)
	expectRefused(t, st, "group c presenting the dialer's own link to it")
	_, same := svid(t, ca, nodeSVID(acceptor.Group, "x"))
	st = raw(t, ctx, acceptor.Addr(), same, "sb-node", acceptor.Group+"/x", "sb-group", acceptor.Group, "sb-link-id", "L-new")
	expectRefused(t, st, "a node of the acceptor's own group presenting a link")
	if got := series(t, acceptor.HealthAddr(), "switchboard_node_peer_identity_denied_total")[`reason="link_assignment"`]; got != 2 {
		t.Errorf("%s: peer_identity_denied_total{reason=link_assignment} = %v, want 2", acceptor.ID(), got)
	}

	_, sibling := svid(t, ca, nodeSVID(dialer.Group, "n2"))
	st = raw(t, ctx, acceptor.Addr(), sibling, "sb-node", dialer.Group+"/n2", "sb-group", dialer.Group, "sb-link-id", link.LinkID)
	expectAccepted(t, st, "the dialer's sibling taking the link over")
}

// TestForgedOriginsAreDropped: a message's origin is the node it was published at. A
// peer in the group may send its own messages and those of other groups, but not
// claim another node of the group as their origin; a link never carries a message
// published in the receiving node's own group. What breaks the rule is dropped and
// counted.
func TestForgedOriginsAreDropped(t *testing.T) { onTransports(t, testForgedOriginsAreDropped) }

func testForgedOriginsAreDropped(t *testing.T, raw rawDialer) {
	f, ca := mtlsFabric(t, "", nil, 1, "cloud")
	ctx := deadline(t, 30*time.Second)
	cloud := f.Node("cloud/n1")
	_, local := svid(t, ca, "spiffe://cloud/client/sub")
	s := dialTLS(t, cloud.Addr(), local).subscribe("org/ns/svc")

	_, peer := svid(t, ca, nodeSVID("cloud", "n2"))
	st := raw(t, ctx, cloud.Addr(), peer, "sb-node", "cloud/n2", "sb-group", "cloud")
	expectAccepted(t, st, "cloud/n2")
	send(t, st, 1, message("forged", "cloud/n3", 5), message("own", "cloud/n2", 5), message("relayed", "edge-a/x", 5))
	waitBatchAck(t, st, 1)
	if got, want := strings.Join(payloads(s, 300*time.Millisecond), " "), "own@cloud/n2 relayed@edge-a/x"; got != want {
		t.Errorf("over the peering, the subscriber got %q, want %q", got, want)
	}

	_, edge := svid(t, ca, nodeSVID("edge-a", "x"))
	st = raw(t, ctx, cloud.Addr(), edge, "sb-node", "edge-a/x", "sb-group", "edge-a", "sb-link-id", "L-raw")
	expectAccepted(t, st, "edge-a/x's link")
	send(t, st, 1, message("local", "cloud/n1", 5), message("remote", "edge-b/y", 5))
	waitBatchAck(t, st, 1)
	if got, want := strings.Join(payloads(s, 300*time.Millisecond), " "), "remote@edge-b/y"; got != want {
		t.Errorf("over the link, the subscriber got %q, want %q", got, want)
	}
	drops := series(t, cloud.HealthAddr(), "switchboard_node_messages_dropped_total")
	for _, link := range []string{"peer:cloud/n2", "L-raw"} {
		if got := drops[fmt.Sprintf("link=%q,reason=\"bad_origin\"", link)]; got != 1 {
			t.Errorf("messages_dropped_total{link=%q,reason=bad_origin} = %v, want 1 (all: %v)", link, got, drops)
		}
	}
}

// TestHopCountClampedOnIngress: a message that comes in over a link or a peering with
// more hops than the node's max_hops gets max_hops, and spends one of them here.
func TestHopCountClampedOnIngress(t *testing.T) { onTransports(t, testHopCountClampedOnIngress) }

func testHopCountClampedOnIngress(t *testing.T, raw rawDialer) {
	f := startFabricWith(t, fabric.Options{Node: func(c *node.Config) { c.MaxHops = 8 }}, 1, "b")
	ctx := deadline(t, 30*time.Second)
	nb := f.Node("b/n1")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	for _, tc := range []struct{ what, from string }{{"link", "a/raw"}, {"peering", "b/raw"}} {
		md := []string{"sb-node", tc.from, "sb-group", strings.Split(tc.from, "/")[0]}
		if tc.what == "link" {
			md = append(md, "sb-link-id", "L-raw")
		}
		st := raw(t, ctx, nb.Addr(), nil, md...)
		send(t, st, 1, message(tc.what, tc.from, math.MaxUint32))
		m, err := s.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.GetTtl() != 7 {
			t.Errorf("over a %s, a message sent with ttl %d was delivered with %d hops left, want 7 (max_hops 8, one spent)", tc.what, uint32(math.MaxUint32), m.GetTtl())
		}
	}
}

// TestLinkFailoverOverMTLS: with identities checked, a link still moves to a sibling
// when the node that dials it crashes: the sibling presents the same link id, and is of
// the link's group, so the node the link leads to accepts it, and delivery comes back.
func TestLinkFailoverOverMTLS(t *testing.T) {
	f, ca := mtlsFabric(t, pairAB, nil, 2, "a", "b")
	ctx := deadline(t, 60*time.Second)
	links, err := f.ControlPlane().Store().ListLinks(ctx, store.LinkFilter{})
	if err != nil || len(links) != 1 {
		t.Fatalf("links %+v, %v; want one", links, err)
	}
	src := links[0].SourceNodeID
	sibling, dest := links[0].SourceGroup+"/n1", links[0].DestGroup+"/n1"
	if sibling == src {
		sibling = links[0].SourceGroup + "/n2"
	}
	// Each client holds a certificate of its node's group: only those may use the
	// client API.
	_, subConf := svid(t, ca, "spiffe://"+links[0].DestGroup+"/client/app")
	_, pubConf := svid(t, ca, "spiffe://"+links[0].SourceGroup+"/client/app")
	s := dialTLS(t, f.Node(dest).Addr(), subConf).subscribe("org/ns/svc")
	pub := dialTLS(t, f.Node(sibling).Addr(), pubConf)
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if err := f.StopNode(src, true); err != nil {
		t.Fatal(err)
	}
	waitReached(t, ctx, pub, s, "org/ns/svc")
	after, err := f.ControlPlane().Store().ListLinks(ctx, store.LinkFilter{})
	if err != nil || len(after) != 1 || after[0].ID != links[0].ID || after[0].SourceNodeID != sibling {
		t.Fatalf("links after the crash %+v, %v; want link %s dialled by %s", after, err, links[0].ID, sibling)
	}
	if got := sumOf(series(t, f.Node(dest).HealthAddr(), "switchboard_node_peer_identity_denied_total")); got != 0 {
		t.Errorf("%s refused %v streams during the failover", dest, got)
	}
}

// fakePeer is a LinkService that accepts every stream and records what it is sent.
type fakePeer struct {
	nodev1.UnimplementedLinkServiceServer
	got chan string
}

func (p *fakePeer) Link(s nodev1.LinkService_LinkServer) error {
	if err := s.SendHeader(nil); err != nil {
		return err
	}
	for {
		f, err := s.Recv()
		if err != nil {
			return nil //nolint:nilerr // the dialer went: nothing to report
		}
		select {
		case p.got <- describe(f):
		default:
		}
	}
}

// TestPeeringGoesOnlyToTheNodeNamed: a registry entry that names a node of the group at
// the address of a server whose certificate is another group's gets no peering: the
// node checks the certificate of the node it dials, and sends it nothing.
func TestPeeringGoesOnlyToTheNodeNamed(t *testing.T) {
	f, ca := mtlsFabric(t, "", nil, 1, "cloud")
	ctx := deadline(t, 30*time.Second)
	cloud := f.Node("cloud/n1")
	_, local := svid(t, ca, "spiffe://cloud/client/app")
	dialTLS(t, cloud.Addr(), local).subscribe("org/ns/svc") // an offer the peering would carry

	serverConf, _ := svid(t, ca, nodeSVID("edge-a", "x"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakePeer{got: make(chan string, 100)}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverConf)))
	nodev1.RegisterLinkServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	port := lis.Addr().(*net.TCPAddr).Port
	entry := endpoint.Endpoint{Cluster: "cloud", Service: node.ServiceName, Protocol: "grpc", Address: "127.0.0.1", Port: port,
		Node: "n7", Priority: 1, TTL: endpoint.TTL(time.Minute)}
	if err := f.Registry().Apply(ctx, []registry.Op{registry.Register(entry)}); err != nil {
		t.Fatal(err)
	}
	for sumOf(series(t, cloud.HealthAddr(), "switchboard_node_link_connect_failures_total")) == 0 {
		select {
		case got := <-fake.got:
			t.Fatalf("a server of edge-a, registered as cloud/n7, was sent %s", got)
		case <-ctx.Done():
			t.Fatal("cloud/n1 never tried the peering (or never counted its failure)")
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case got := <-fake.got:
		t.Fatalf("a server of edge-a, registered as cloud/n7, was sent %s", got)
	case <-time.After(500 * time.Millisecond):
	}
}
