package southbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// registerAt is registerMsg with the external endpoint the node announces, which a
// takeover would replace.
func registerAt(group, id, credentials, external string) *controllerv1.ControlMessage {
	m := registerMsg(group, id, credentials)
	m.GetRegisterNodeRequest().GetConnectionDetails()[0].ExternalEndpoint = external
	return m
}

// claim opens a stream on conn and registers with msg, without reading the answer.
func (f *fixture) claim(conn *grpc.ClientConn, msg *controllerv1.ControlMessage) *node {
	f.t.Helper()
	n := f.openOn(conn)
	n.send(msg)
	return n
}

// registered reads the answer to a registration and fails unless it is a success.
func (n *node) registered(nodeID string) {
	n.t.Helper()
	resp, err := n.stream.Recv()
	if err != nil || !resp.GetRegisterNodeResponse().GetSuccess() || resp.GetRegisterNodeResponse().GetNodeId() != nodeID {
		n.t.Fatalf("registration of %s answered with %v, %v", nodeID, resp, err)
	}
}

// refused reads the answer to a registration and fails unless the stream ended with
// code and a message containing reason.
func (n *node) refused(code codes.Code, reason string) {
	n.t.Helper()
	resp, err := n.stream.Recv()
	if err == nil {
		n.t.Fatalf("the registration was answered with %v: a second caller took over the live node", resp)
	}
	wantStatus(n.t, err, code, reason)
}

// answer keeps a registered raw node alive as a data-plane node is: it answers the
// connection list requests by which the control plane asks whether a session is
// live, until the stream ends; the channel then gets the stream's status.
func (n *node) answer() <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			msg, err := n.stream.Recv()
			if err != nil {
				done <- err
				return
			}
			if msg.GetConnectionListRequest() == nil {
				continue
			}
			_ = n.stream.Send(&controllerv1.ControlMessage{MessageId: "answer-" + msg.GetMessageId(), ReplyTo: msg.GetMessageId(),
				Payload: &controllerv1.ControlMessage_ConnectionListResponse{ConnectionListResponse: &controllerv1.ConnectionListResponse{}}})
		}
	}()
	return done
}

// stillOpen fails if the stream behind done ended.
func stillOpen(t *testing.T, done <-chan error, who string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s lost its session: %v", who, err)
	case <-time.After(200 * time.Millisecond):
	}
}

// external is the external endpoint the store holds for the node.
func (f *fixture) external(nodeID string) string {
	f.t.Helper()
	nd, err := f.st.GetNode(context.Background(), nodeID)
	if err != nil || len(nd.ConnDetails) == 0 {
		f.t.Fatalf("node %s: %+v, %v", nodeID, nd, err)
	}
	return nd.ConnDetails[0].ExternalEndpoint
}

// wantLog fails unless one warning contains every part.
func (f *fixture) wantLog(parts ...string) {
	f.t.Helper()
	if len(f.logs.lines(append([]string{"level=WARN"}, parts...)...)) == 0 {
		f.t.Fatalf("no warning with %q; warnings:\n%s", parts, strings.Join(f.logs.lines("level=WARN"), "\n"))
	}
}

// TestLiveNodeIsNotTakenOverFromAnotherAddress: without registration auth and client
// certificates, a second client from another address registering a node id whose
// session is live (it answers) is refused: it neither evicts the session nor
// replaces the node's endpoint. Both peers are named in the warning.
func TestLiveNodeIsNotTakenOverFromAnotherAddress(t *testing.T) {
	f := serveFixture(t, fixtureOptions{probeTimeout: 2 * time.Second})
	owner := f.claim(f.conn, registerAt("cloud", "n1", "", "owner.example:443"))
	owner.registered("cloud/n1")
	ownerDone := owner.answer()
	intruder := f.claim(f.dial("127.0.0.2", insecure.NewCredentials()), registerAt("cloud", "n1", "", "intruder.example:443"))
	intruder.refused(codes.AlreadyExists, "cloud/n1")
	stillOpen(t, ownerDone, "the node")
	if got := f.external("cloud/n1"); got != "owner.example:443" {
		t.Fatalf("the node's endpoint is now %s", got)
	}
	f.wantLog("registration refused", "cloud/n1", "peer=127.0.0.2:", "holder_peer=127.0.0.1:")
}

// TestQuietNodeIsReplacedFromAnotherAddress: a session that no longer answers (a
// hung node, or a connection that broke without the control plane noticing) is
// replaced by the node's next registration from wherever it comes, and the warning
// names both peers and why.
func TestQuietNodeIsReplacedFromAnotherAddress(t *testing.T) {
	f := serveFixture(t, fixtureOptions{probeTimeout: 300 * time.Millisecond})
	old := f.register("cloud", "n1", "") // never answers
	again := f.claim(f.dial("127.0.0.2", insecure.NewCredentials()), registerAt("cloud", "n1", "", "again.example:443"))
	again.registered("cloud/n1")
	wantStatus(t, old.recvErr(), codes.Aborted, "replaced by a newer connection")
	if got := f.external("cloud/n1"); got != "again.example:443" {
		t.Fatalf("the node's endpoint is %s", got)
	}
	f.wantLog("replaced", "cloud/n1", "peer=127.0.0.2:", "replaced_peer=127.0.0.1:", "did not answer")
}

// TestRestartedNodeReconnectsFromAnotherAddress: a node that restarts elsewhere
// (its old connection closed) registers again at once, without waiting for the
// probe of its old session to time out.
func TestRestartedNodeReconnectsFromAnotherAddress(t *testing.T) {
	f := serveFixture(t, fixtureOptions{probeTimeout: 30 * time.Second})
	first := f.dial("127.0.0.1", insecure.NewCredentials())
	f.claim(first, registerAt("cloud", "n1", "", "old.example:443")).registered("cloud/n1")
	first.Close()
	start := time.Now()
	f.claim(f.dial("127.0.0.2", insecure.NewCredentials()), registerAt("cloud", "n1", "", "new.example:443")).registered("cloud/n1")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the restarted node registered after %s", took)
	}
	if got := f.external("cloud/n1"); got != "new.example:443" {
		t.Fatalf("the node's endpoint is %s", got)
	}
}

// mtls is a southbound fixture that requires client certificates from ca.
func mtls(t *testing.T) (*fixture, *tlstest.CA) {
	t.Helper()
	ca, err := tlstest.NewCA("southbound test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("spiffe://cp/controlplane", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	return serveFixture(t, fixtureOptions{creds: creds, probeTimeout: 2 * time.Second}), ca
}

// as dials the fixture from ip with a new client certificate for spiffeID.
func (f *fixture) as(ca *tlstest.CA, spiffeID, ip string) *grpc.ClientConn {
	f.t.Helper()
	leaf, err := ca.Issue(spiffeID)
	if err != nil {
		f.t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		f.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return f.dial(ip, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
}

// TestLiveNodeIsReplacedOnlyBySameCertificate: with client certificates, the
// certificate's identity decides, not the address: another identity is refused
// while the node's session is live, even from the node's own address; the same
// identity (a new certificate, another address) replaces it at once.
func TestLiveNodeIsReplacedOnlyBySameCertificate(t *testing.T) {
	f, ca := mtls(t)
	owner := f.claim(f.as(ca, "spiffe://cloud/node/n1", "127.0.0.1"), registerAt("cloud", "n1", "", "owner.example:443"))
	owner.registered("cloud/n1")
	ownerDone := owner.answer()
	intruder := f.claim(f.as(ca, "spiffe://cloud/node/intruder", "127.0.0.1"), registerAt("cloud", "n1", "", "intruder.example:443"))
	intruder.refused(codes.AlreadyExists, "cloud/n1")
	stillOpen(t, ownerDone, "the node")
	f.wantLog("registration refused", "identity=spiffe://cloud/node/intruder", "holder_identity=spiffe://cloud/node/n1")

	again := f.claim(f.as(ca, "spiffe://cloud/node/n1", "127.0.0.2"), registerAt("cloud", "n1", "", "again.example:443"))
	again.registered("cloud/n1")
	wantStatus(t, <-ownerDone, codes.Aborted, "replaced by a newer connection")
	if got := f.external("cloud/n1"); got != "again.example:443" {
		t.Fatalf("the node's endpoint is %s", got)
	}
	f.wantLog("replaced", "cloud/n1", "peer=127.0.0.2:", "identity=spiffe://cloud/node/n1", "replaced_peer=127.0.0.1:",
		"replaced_identity=spiffe://cloud/node/n1", "same identity")
}

// TestLiveNodeIsReplacedOnlyBySameSVID: with SPIFFE registration auth, the SVID's
// SPIFFE ID is the identity: another SPIFFE ID that maps to the same node is refused
// while the node's session is live; a fresh SVID of the node's own ID replaces it.
func TestLiveNodeIsReplacedOnlyBySameSVID(t *testing.T) {
	cloud := newJWTAuthority(t, "cloud")
	verifier, err := nodeauth.NewSPIFFE(jwtbundle.NewSet(cloud.bundle()), "")
	if err != nil {
		t.Fatal(err)
	}
	f := serveFixture(t, fixtureOptions{auth: verifier, probeTimeout: 2 * time.Second})
	later := time.Now().Add(5 * time.Minute)
	owner := f.claim(f.conn, registerAt("cloud", "n1", cloud.svid(t, "node/n1", later), "owner.example:443"))
	owner.registered("cloud/n1")
	ownerDone := owner.answer()
	intruder := f.claim(f.dial("127.0.0.2", insecure.NewCredentials()),
		registerAt("cloud", "n1", cloud.svid(t, "intruder/n1", later), "intruder.example:443"))
	intruder.refused(codes.AlreadyExists, "cloud/n1")
	stillOpen(t, ownerDone, "the node")

	again := f.claim(f.dial("127.0.0.2", insecure.NewCredentials()),
		registerAt("cloud", "n1", cloud.svid(t, "node/n1", later.Add(time.Second)), "again.example:443"))
	again.registered("cloud/n1")
	wantStatus(t, <-ownerDone, codes.Aborted, "replaced by a newer connection")
	f.wantLog("replaced", "identity=spiffe://cloud/node/n1", "replaced_identity=spiffe://cloud/node/n1")
}

// TestQuietNodeIsNotTakenByAnotherCertificate: a session whose node proved an identity
// (its client certificate) is not handed to a caller proving another one, even when
// the node stops answering: only callers that prove nothing are let in on silence.
func TestQuietNodeIsNotTakenByAnotherCertificate(t *testing.T) {
	f, ca := mtls(t)
	owner := f.claim(f.as(ca, "spiffe://cloud/node/n1", "127.0.0.1"), registerAt("cloud", "n1", "", "owner.example:443"))
	owner.registered("cloud/n1") // and never answers
	intruder := f.claim(f.as(ca, "spiffe://cloud/node/intruder", "127.0.0.2"), registerAt("cloud", "n1", "", "intruder.example:443"))
	intruder.refused(codes.AlreadyExists, "cloud/n1")
	if got := f.external("cloud/n1"); got != "owner.example:443" {
		t.Fatalf("the node's endpoint is %s, want the owner's", got)
	}
}
