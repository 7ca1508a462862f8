package dataplane_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const groupSecret = "alpha-group-secret-0123456789abcdef"

type fixture struct {
	t      *testing.T
	ctx    context.Context
	peer   *cpPeer
	dp     *memdp.Datapath
	ctrl   *dataplane.Controller
	runErr chan error
}

// newFixture starts a scripted CP and a controller against it. setup may adjust the
// peer or the config before Run starts.
func newFixture(t *testing.T, setup func(*cpPeer, *dataplane.Config)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f := &fixture{t: t, ctx: ctx, peer: startPeer(t), dp: memdp.New(), runErr: make(chan error, 1)}
	tokens, err := nodeauth.NewSharedSecretProvider(groupSecret, nodeauth.SharedSecretOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dataplane.Config{
		NodeID: "n1", Group: "alpha",
		Details:     []dataplane.ConnectionDetails{{Endpoint: "10.0.0.1:46357", ExternalEndpoint: "lb.alpha:443", Metadata: map[string]string{"zone": "a"}}},
		Target:      f.peer.addr,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		Tokens:      tokens,
		Datapath:    f.dp,
		Backoff:     dataplane.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond},
	}
	if setup != nil {
		setup(f.peer, &cfg)
	}
	if f.ctrl, err = dataplane.New(cfg); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() { f.runErr <- f.ctrl.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-f.runErr:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		f.dp.Close()
		cancel()
	})
	return f
}

func cmdMsg(cmd *controllerv1.ConfigCommand) *controllerv1.ControlMessage {
	return &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd}}
}

func conn(link, endpoint string) *controllerv1.Connection {
	return &controllerv1.Connection{LinkId: link, Endpoint: endpoint, ConfigJson: `{"keepalive":"10s"}`}
}

func sub(link, c0, c1, c2 string, id ...uint64) *controllerv1.Subscription {
	s := &controllerv1.Subscription{Component_0: c0, Component_1: c1, Component_2: c2, LinkId: link}
	if len(id) > 0 {
		s.ComponentId = &id[0]
	}
	return s
}

type result struct {
	ok  bool
	err string
}

func connStatuses(ack *controllerv1.ConfigCommandAck) map[string]result {
	out := map[string]result{}
	for _, s := range ack.GetConnectionsStatus() {
		out[s.GetLinkId()] = result{s.GetSuccess(), s.GetError()}
	}
	return out
}

func subStatuses(ack *controllerv1.ConfigCommandAck) []result {
	var out []result
	for _, s := range ack.GetSubscriptionsStatus() {
		out = append(out, result{s.GetSuccess(), s.GetError()})
	}
	return out
}

func TestRegistrationContent(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	reg := ps.reg
	if reg.GetNodeId() != "n1" || reg.GetGroupName() != "alpha" {
		t.Fatalf("registered as %q in %q", reg.GetNodeId(), reg.GetGroupName())
	}
	d := reg.GetConnectionDetails()
	if len(d) != 1 || d[0].GetEndpoint() != "10.0.0.1:46357" || d[0].GetExternalEndpoint() != "lb.alpha:443" || d[0].GetMetadata()["zone"] != "a" {
		t.Fatalf("connection details %v", d)
	}
	if len(reg.GetConnections()) != 0 {
		t.Fatalf("fresh node reported connections %v", reg.GetConnections())
	}
	// The credentials are a real shared-secret token the CP's verifier accepts.
	v, err := nodeauth.NewSharedSecret(map[string]string{"alpha": groupSecret}, nodeauth.SharedSecretOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(f.ctx, reg.GetCredentials(), "alpha", "n1"); err != nil {
		t.Fatalf("CP rejects the node's credentials: %v", err)
	}
	if err := f.ctrl.WaitRegistered(f.ctx); err != nil || !f.ctrl.Registered() {
		t.Fatalf("controller does not report registered: %v", err)
	}
}

func TestRegistrationReportsLiveConnectionsAfterReconnect(t *testing.T) {
	f := newFixture(t, nil)
	f.dp.Accept("L-in", "10.9.9.9:5000") // a link whose dialer is another node
	ps := f.peer.next(f.ctx)
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{
		conn("L-b", "10.0.0.2:1"), conn("L-a", "10.0.0.3:1"), conn("L-gone", "10.0.0.4:1")}})
	if st := connStatuses(ack); !st["L-a"].ok || !st["L-b"].ok || !st["L-gone"].ok {
		t.Fatalf("create statuses %v", st)
	}
	for _, ci := range f.dp.Connections() {
		if ci.LinkID == "L-gone" {
			f.dp.Drop(ci.ID) // lost while the node is connected
		}
	}
	ps.dropStream(f.ctx)
	ps2 := f.peer.next(f.ctx)
	want := []string{"L-a", "L-b", "L-in"}
	if got := ps2.reg.GetConnections(); !slices.Equal(got, want) {
		t.Fatalf("re-registration reports %v, want %v", got, want)
	}
	// Reconnecting must not have touched the datapath's connections.
	if n := len(f.dp.Connections()); n != 3 {
		t.Fatalf("datapath holds %d connections after reconnect, want 3", n)
	}
}

func TestSectionsRunInOrder(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	setup := ps.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1"), conn("L2", "10.0.0.2:1")},
		SubscriptionsToSet:  []*controllerv1.Subscription{sub("L2", "org", "ns", "old")},
	})
	if st := subStatuses(setup); len(st) != 1 || !st[0].ok {
		t.Fatalf("setup subscription %v", st)
	}
	before := len(f.dp.Ops())
	// Sections deliberately listed in the message in reverse of the processing order.
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{
		SubscriptionsToDelete: []*controllerv1.Subscription{sub("L2", "org", "ns", "old")},
		SubscriptionsToSet:    []*controllerv1.Subscription{sub("L3", "org", "ns", "new")},
		ConnectionsToCreate:   []*controllerv1.Connection{conn("L3", "10.0.0.3:1")},
		ConnectionsToDelete:   []string{"L1"},
	})
	want := []string{
		"disconnect L1",
		"connect L3 10.0.0.3:1",
		"subscribe L3 org/ns/new",
		"unsubscribe L2 org/ns/old",
	}
	if got := f.dp.Ops()[before:]; !slices.Equal(got, want) {
		t.Fatalf("datapath operations\n got %q\nwant %q", got, want)
	}
	if cs, ss := connStatuses(ack), subStatuses(ack); !cs["L1"].ok || !cs["L3"].ok || len(ss) != 2 || !ss[0].ok || !ss[1].ok {
		t.Fatalf("statuses %v %v", cs, ss)
	}
}

func TestAckContents(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	f.dp.FailConnect("10.0.0.66:1", errors.New("connection refused"))
	msg := cmdMsg(&controllerv1.ConfigCommand{
		ConnectionsToDelete: []string{"L-unknown"},
		ConnectionsToCreate: []*controllerv1.Connection{
			conn("L1", "10.0.0.1:1"), // already live: reused
			{LinkId: "L-bad", Endpoint: "10.0.0.5:1", ConfigJson: `[1,2]`},
			{LinkId: "L-cfg", ConfigJson: `{"endpoint":"10.0.0.7:1"}`},
			conn("L-refused", "10.0.0.66:1"),
			conn("L-same", "10.0.0.1:1"), // reuses L1's connection by endpoint
		},
		SubscriptionsToSet: []*controllerv1.Subscription{
			sub("L1", "org", "ns", "svc", 7),
			sub("L-nowhere", "org", "ns", "svc"),
			sub("", "org", "ns", "svc"),
			sub("L1", "org", "", "svc"),
		},
		SubscriptionsToDelete: []*controllerv1.Subscription{
			sub("L1", "org", "ns", "never-set"),
			sub("L-nowhere", "org", "ns", "svc"),
		},
	})
	reply, _ := ps.request(f.ctx, msg)
	if reply.GetReplyTo() != msg.GetMessageId() {
		t.Fatalf("reply_to %q, want %q", reply.GetReplyTo(), msg.GetMessageId())
	}
	ack := reply.GetConfigCommandAck()
	cs := connStatuses(ack)
	check := func(what string, got result, ok bool, errHas string) {
		t.Helper()
		if got.ok != ok || !strings.Contains(got.err, errHas) || (ok && got.err != "") {
			t.Errorf("%s: got %+v, want ok=%v err containing %q", what, got, ok, errHas)
		}
	}
	check("delete unknown", cs["L-unknown"], false, "connection not found")
	if cs["L-unknown"].err != dataplane.StatusConnectionNotFound {
		t.Errorf("delete unknown must say exactly %q, got %q", dataplane.StatusConnectionNotFound, cs["L-unknown"].err)
	}
	check("reuse live", cs["L1"], true, "")
	check("bad json", cs["L-bad"], false, "config_json")
	check("endpoint from config", cs["L-cfg"], true, "")
	check("connect fails", cs["L-refused"], false, "connection refused")
	check("reuse by endpoint", cs["L-same"], true, "")
	ss := subStatuses(ack)
	if len(ss) != 6 {
		t.Fatalf("%d subscription statuses, want 6", len(ss))
	}
	check("subscribe", ss[0], true, "")
	if ss[1].err != dataplane.StatusConnectionNotFound {
		t.Errorf("subscribe on unknown link: %+v", ss[1])
	}
	check("no link id", ss[2], false, "link_id")
	check("empty component", ss[3], false, "component 1 is empty")
	if ss[4].err != dataplane.StatusSubscriptionNotFound || ss[5].err != dataplane.StatusSubscriptionNotFound {
		t.Errorf("unsubscribe of unknown subscription / link: %+v %+v", ss[4], ss[5])
	}
	if got := ack.GetSubscriptionsStatus()[0].GetSubscription(); got.GetComponentId() != 7 || got.GetLinkId() != "L1" {
		t.Errorf("status does not echo the subscription: %v", got)
	}
	// L-same reused L1's connection: only one dial to 10.0.0.1:1 ever happened.
	dials := 0
	for _, op := range f.dp.Ops() {
		if strings.HasPrefix(op, "connect ") && strings.HasSuffix(op, " 10.0.0.1:1") {
			dials++
		}
	}
	if dials != 1 {
		t.Errorf("%d dials to 10.0.0.1:1, want 1 (reuse)", dials)
	}
}

func TestDatapathSubscribeFailures(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})

	f.dp.FailSubscribe(errors.New("table full"))
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	if ss := subStatuses(ack); ss[0].ok || !strings.Contains(ss[0].err, "table full") {
		t.Fatalf("sync failure: %+v", ss)
	}
	f.dp.FailSubscribe(nil)

	f.dp.RejectAcks(errors.New("peer refused subscription"))
	ack = ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	if ss := subStatuses(ack); ss[0].ok || !strings.Contains(ss[0].err, "peer refused") {
		t.Fatalf("rejected ack: %+v", ss)
	}
	f.dp.RejectAcks(nil)
	if n := len(f.dp.Subscriptions()); n != 0 {
		t.Fatalf("rejected subscription still installed (%d)", n)
	}
	// A delete for it now finds nothing: the rejected subscribe left no id behind.
	ack = ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToDelete: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	if ss := subStatuses(ack); ss[0].err != dataplane.StatusSubscriptionNotFound {
		t.Fatalf("delete after rejected subscribe: %+v", ss)
	}

	// Connection lost between the CP's pre-flight check and the subscribe (TOCTOU).
	for _, ci := range f.dp.Connections() {
		f.dp.Drop(ci.ID)
	}
	ack = ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	if ss := subStatuses(ack); ss[0].err != dataplane.StatusConnectionNotFound {
		t.Fatalf("subscribe on dropped connection: %+v", ss)
	}
}

func TestAckTimeoutSendsFailure(t *testing.T) {
	f := newFixture(t, func(_ *cpPeer, c *dataplane.Config) { c.AckTimeout = 100 * time.Millisecond })
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	f.dp.HoldAcks(true) // the datapath never acks
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{
		sub("L1", "a", "b", "slow"), sub("L-x", "a", "b", "c")}})
	ss := subStatuses(ack)
	if len(ss) != 2 || ss[0].ok || !strings.Contains(ss[0].err, "ack timeout") || ss[1].err != dataplane.StatusConnectionNotFound {
		t.Fatalf("statuses %+v", ss)
	}
	// A late ack after the timeout changes nothing and sends nothing.
	if f.dp.ReleaseAcks() != 1 {
		t.Fatal("expected one held ack")
	}
	if got := ps.connections(f.ctx); len(got) != 1 {
		t.Fatalf("connections %v", got)
	}
	select {
	case m := <-ps.in:
		t.Fatalf("unexpected message after late ack: %v", m)
	default:
	}
}

func TestHeldAckDoesNotBlockLaterRequests(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	f.dp.HoldAcks(true)
	held := cmdMsg(&controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	held.MessageId = "cp-held"
	if err := ps.send(held); err != nil {
		t.Fatal(err)
	}
	// A later request is answered while the first command still waits for its ack.
	if got := ps.subscriptions(f.ctx); len(got) != 1 {
		t.Fatalf("subscription list while ack pending: %v", got)
	}
	f.dp.HoldAcks(false)
	if n := f.dp.ReleaseAcks(); n != 1 {
		t.Fatalf("released %d acks", n)
	}
	m := ps.recv(f.ctx)
	if m.GetReplyTo() != "cp-held" || !m.GetConfigCommandAck().GetSubscriptionsStatus()[0].GetSuccess() {
		t.Fatalf("ack for held command: %v", m)
	}
}

func TestDelayedAcks(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	f.dp.DelayAcks(20 * time.Millisecond)
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{
		sub("L1", "a", "b", "c"), sub("L1", "a", "b", "d", 3)}})
	if ss := subStatuses(ack); len(ss) != 2 || !ss[0].ok || !ss[1].ok {
		t.Fatalf("delayed acks: %+v", ss)
	}
}

func TestListsFromDatapath(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	in := f.dp.Accept("L-in", "10.9.9.9:5000")
	f.dp.Accept("", "10.9.9.8:5000") // not a CP link: not reported
	ps.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1"), conn("L1b", "10.0.0.1:1")},
		SubscriptionsToSet: []*controllerv1.Subscription{
			sub("L1", "a", "b", "c", 9), sub("L-in", "x", "y", "z")},
	})
	entries := ps.connections(f.ctx)
	var got []string
	for _, e := range entries {
		got = append(got, e.GetLinkId()+"@"+e.GetEndpoint())
	}
	want := []string{"L-in@10.9.9.9:5000", "L1@10.0.0.1:1", "L1b@10.0.0.1:1"}
	if !slices.Equal(got, want) {
		t.Fatalf("connection list %v, want %v", got, want)
	}
	if entries[0].GetConnId() != uint64(in) {
		t.Fatalf("conn id %d, want %d", entries[0].GetConnId(), in)
	}
	subs := ps.subscriptions(f.ctx)
	var sgot []string
	for _, s := range subs {
		id := "-"
		if s.ComponentId != nil {
			id = "9"
		}
		sgot = append(sgot, s.GetLinkId()+":"+s.GetComponent_2()+":"+id)
	}
	// The L1 subscription is reported for both links sharing its connection.
	swant := []string{"L-in:z:-", "L1:c:9", "L1b:c:9"}
	if !slices.Equal(sgot, swant) {
		t.Fatalf("subscription list %v, want %v", sgot, swant)
	}
}

func TestReconnectAfterStreamDropResetsState(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1"), conn("L2", "10.0.0.2:1")},
		SubscriptionsToSet:  []*controllerv1.Subscription{sub("L1", "a", "b", "c")},
	})
	// A command whose ack is pending when the stream drops.
	f.dp.HoldAcks(true)
	if err := ps.send(cmdMsg(&controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{sub("L2", "a", "b", "pending")}})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.ctx, func() bool { return slices.Contains(f.dp.Ops(), "subscribe L2 a/b/pending") })
	ps.dropStream(f.ctx)

	ps2 := f.peer.next(f.ctx)
	if got := ps2.reg.GetConnections(); !slices.Equal(got, []string{"L1", "L2"}) {
		t.Fatalf("re-registration connections %v", got)
	}
	// The drained waiter must not answer on the new stream when its ack finally comes.
	f.dp.HoldAcks(false)
	f.dp.ReleaseAcks()
	reply, others := ps2.request(f.ctx, &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}}})
	if len(others) != 0 || len(reply.GetConnectionListResponse().GetEntries()) != 2 {
		t.Fatalf("after reconnect: reply %v, stray messages %v", reply, others)
	}
	// State rebuilt from the datapath: deletes issued in the new session find their targets.
	ack := ps2.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToDelete:   []string{"L2"},
		SubscriptionsToDelete: []*controllerv1.Subscription{sub("L1", "a", "b", "c")},
	})
	if cs, ss := connStatuses(ack), subStatuses(ack); !cs["L2"].ok || !ss[0].ok {
		t.Fatalf("deletes after reconnect: %v %v", cs, ss)
	}
	// The session counts its registration after reading the response, on its own
	// goroutine, which may run after this session's first commands were answered.
	waitFor(t, f.ctx, func() bool { return f.ctrl.Stats().Registrations == 2 })
	if st := f.ctrl.Stats(); st.Registrations != 2 || st.Attempts != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReconnectAfterServerRestartFlushesNotifications(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	// While connected an announcement goes out at once.
	if err := f.ctrl.Announce(dataplane.NewName("org", "ns", "early")); err != nil {
		t.Fatal(err)
	}
	if m := ps.recv(f.ctx); len(m.GetConfigCommand().GetSubscriptionsToSet()) != 1 || m.GetConfigCommand().GetSubscriptionsToSet()[0].GetLinkId() != "" {
		t.Fatalf("announcement: %v", m)
	}
	f.peer.stop()
	waitFor(t, f.ctx, func() bool { return !f.ctrl.Registered() })
	before := f.ctrl.Stats().Attempts
	// Made while the CP is down: queued.
	if err := f.ctrl.Announce(dataplane.NewName("org", "ns", "late").WithID(4)); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.ClaimLink(dataplane.Claim{LinkID: "L-claim", Endpoint: "10.0.0.1:46357", RemoteNodeID: "beta/n7"}); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.Withdraw(dataplane.NewName("org", "ns", "early")); err != nil {
		t.Fatal(err)
	}
	// Several attempts fail against the dead address; the controller keeps going.
	waitFor(t, f.ctx, func() bool { return f.ctrl.Stats().Attempts >= before+3 })
	f.peer.restart()
	ps2 := f.peer.next(f.ctx)
	m := ps2.recv(f.ctx)
	cmd := m.GetConfigCommand()
	if cmd == nil || len(cmd.GetSubscriptionsToSet()) != 1 || len(cmd.GetConnectionsReceived()) != 1 {
		t.Fatalf("flushed notifications: %v", m)
	}
	if s := cmd.GetSubscriptionsToSet()[0]; s.GetComponent_2() != "late" || s.GetComponentId() != 4 || s.GetLinkId() != "" {
		t.Fatalf("announcement %v", s)
	}
	if c := cmd.GetConnectionsReceived()[0]; c.GetLinkId() != "L-claim" || c.GetRemoteNodeId() != "beta/n7" {
		t.Fatalf("claim %v", c)
	}
	// Withdraw while connected sends a delete without link id; ReleaseClaim stops replay.
	if err := f.ctrl.Withdraw(dataplane.NewName("org", "ns", "late").WithID(4)); err != nil {
		t.Fatal(err)
	}
	if m := ps2.recv(f.ctx); len(m.GetConfigCommand().GetSubscriptionsToDelete()) != 1 {
		t.Fatalf("withdraw: %v", m)
	}
	f.ctrl.ReleaseClaim("L-claim")
	ps2.dropStream(f.ctx)
	ps3 := f.peer.next(f.ctx)
	reply, others := ps3.request(f.ctx, &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_SubscriptionListRequest{SubscriptionListRequest: &controllerv1.SubscriptionListRequest{}}})
	if len(others) != 0 || reply.GetSubscriptionListResponse() == nil {
		t.Fatalf("nothing left to replay, yet got %v", others)
	}
}

func TestNeverGivesUp(t *testing.T) {
	for _, withStatus := range []bool{false, true} {
		name := map[bool]string{false: "rejected response", true: "PermissionDenied status"}[withStatus]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(p *cpPeer, _ *dataplane.Config) { p.decide = rejectFirst(5, withStatus) })
			ps := f.peer.next(f.ctx)
			if n := len(f.peer.registrations()); n != 6 {
				t.Fatalf("%d registrations seen, want 6 (5 refused, then accepted)", n)
			}
			if ps.reg.GetNodeId() != "n1" {
				t.Fatal(ps.reg)
			}
			if err := f.ctrl.WaitRegistered(f.ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// failingTokens fails the first n calls, then delegates.
type failingTokens struct {
	nodeauth.TokenProvider
	n, calls atomic.Int32
}

func (p *failingTokens) Token(ctx context.Context, group, node string) (string, error) {
	if p.calls.Add(1) <= p.n.Load() {
		return "", errors.New("workload API unavailable")
	}
	return p.TokenProvider.Token(ctx, group, node)
}

func TestTokenFailureAbortsAttempt(t *testing.T) {
	tokens := &failingTokens{}
	tokens.n.Store(3)
	f := newFixture(t, func(_ *cpPeer, c *dataplane.Config) {
		tokens.TokenProvider = c.Tokens
		c.Tokens = tokens
	})
	ps := f.peer.next(f.ctx)
	if ps.reg.GetCredentials() == "" {
		t.Fatal("registered with empty credentials")
	}
	// Aborted attempts never opened a stream, so nothing with empty credentials was sent.
	if opened, regs := f.peer.streamsOpened(), len(f.peer.registrations()); opened != 1 || regs != 1 {
		t.Fatalf("streams opened %d, registrations %d; want 1 and 1", opened, regs)
	}
	if st := f.ctrl.Stats(); st.TokenFailures != 3 || st.Attempts != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDeregister(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	if err := f.ctrl.WaitRegistered(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.Deregister(f.ctx); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	m := ps.recv(f.ctx)
	if d := m.GetDeregisterNodeRequest(); d == nil || d.GetNodeId() != "alpha/n1" {
		t.Fatalf("CP received %v", m)
	}
	select {
	case err := <-f.runErr:
		if err != nil {
			t.Fatalf("Run after deregister: %v", err)
		}
		f.runErr <- err // for cleanup
	case <-f.ctx.Done():
		t.Fatal("Run did not return after Deregister")
	}
	if n := len(f.peer.registrations()); n != 1 {
		t.Fatalf("node re-registered after leaving (%d registrations)", n)
	}
}

func TestDeregisterWithoutResponseTimesOut(t *testing.T) {
	f := newFixture(t, func(p *cpPeer, _ *dataplane.Config) { p.noDereg = true })
	f.peer.next(f.ctx)
	if err := f.ctrl.WaitRegistered(f.ctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 100*time.Millisecond)
	defer cancel()
	if err := f.ctrl.Deregister(ctx); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline error, got %v", err)
	}
	select {
	case err := <-f.runErr:
		f.runErr <- err
	case <-f.ctx.Done():
		t.Fatal("Run did not return after a failed Deregister")
	}
}

func TestDeregisterWhenDisconnected(t *testing.T) {
	f := newFixture(t, func(p *cpPeer, _ *dataplane.Config) { p.decide = rejectFirst(1000, false) })
	waitFor(t, f.ctx, func() bool { return len(f.peer.registrations()) > 0 })
	if err := f.ctrl.Deregister(f.ctx); !errors.Is(err, dataplane.ErrNotConnected) {
		t.Fatalf("want ErrNotConnected, got %v", err)
	}
	select {
	case err := <-f.runErr:
		f.runErr <- err
	case <-f.ctx.Done():
		t.Fatal("Run did not return")
	}
}

func TestNewValidates(t *testing.T) {
	dp := memdp.New()
	for _, cfg := range []dataplane.Config{
		{Group: "g", Target: "x", Datapath: dp},
		{NodeID: "n", Group: "g", Target: "x"},
		{NodeID: "n", Group: "g", Datapath: dp},
	} {
		if _, err := dataplane.New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if err := (dataplane.Name{}).Validate(); err == nil {
		t.Error("empty name accepted")
	}
	c, err := dataplane.New(dataplane.Config{NodeID: "n", Group: "g", Target: "127.0.0.1:1", Datapath: dp,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Announce(dataplane.NewName("a", "", "c")); err == nil {
		t.Error("announce of invalid name accepted")
	}
	if err := c.ClaimLink(dataplane.Claim{}); err == nil {
		t.Error("claim without link id accepted")
	}
}

func waitFor(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not reached before deadline")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestDeleteLinkSharingAConnection(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	ps.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToCreate: []*controllerv1.Connection{conn("L2", "10.0.0.1:1")}, // same endpoint: reused
		SubscriptionsToSet:  []*controllerv1.Subscription{sub("L2", "a", "b", "c")},
	})
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToDelete: []string{"L1"}})
	if !connStatuses(ack)["L1"].ok {
		t.Fatalf("delete L1: %v", connStatuses(ack))
	}
	if n := len(f.dp.Connections()); n != 1 {
		t.Fatalf("the shared connection must survive for L2; datapath has %d", n)
	}
	entries := ps.connections(f.ctx)
	if len(entries) != 1 || entries[0].GetLinkId() != "L2" {
		t.Fatalf("connection list after deleting L1: %v", entries)
	}
	// Subscriptions over L2 still work, and deleting L2 now closes the connection.
	ack = ps.command(f.ctx, &controllerv1.ConfigCommand{
		ConnectionsToDelete:   []string{"L2"},
		SubscriptionsToDelete: []*controllerv1.Subscription{sub("L2", "a", "b", "c")},
	})
	if cs, ss := connStatuses(ack), subStatuses(ack); !cs["L2"].ok || ss[0].err != dataplane.StatusSubscriptionNotFound {
		t.Fatalf("delete L2: %v %v", cs, ss)
	}
	if n := len(f.dp.Connections()); n != 0 {
		t.Fatalf("datapath still has %d connections", n)
	}
}

// A subscription the controller did not install itself (made around it on the
// datapath) is still removed when the CP deletes it, not answered "not found".
func TestDeleteSubscriptionMadeAroundTheController(t *testing.T) {
	f := newFixture(t, nil)
	ps := f.peer.next(f.ctx)
	ps.command(f.ctx, &controllerv1.ConfigCommand{ConnectionsToCreate: []*controllerv1.Connection{conn("L1", "10.0.0.1:1")}})
	conns := f.dp.Connections()
	if len(conns) != 1 {
		t.Fatalf("datapath has %d connections", len(conns))
	}
	name := dataplane.Name{Components: [3]string{"a", "b", "c"}, ComponentID: dataplane.NoComponentID}
	if _, err := f.dp.Subscribe(f.ctx, conns[0].ID, name, func(error) {}); err != nil {
		t.Fatal(err)
	}
	ack := ps.command(f.ctx, &controllerv1.ConfigCommand{SubscriptionsToDelete: []*controllerv1.Subscription{sub("L1", "a", "b", "c")}})
	if ss := subStatuses(ack); !ss[0].ok {
		t.Fatalf("delete of a subscription made around the controller: %+v", ss)
	}
	if n := len(f.dp.Subscriptions()); n != 0 {
		t.Fatalf("datapath still has %d subscriptions", n)
	}
}

// plainDatapath hides memdp's Relink: a datapath that cannot hand connections over.
type plainDatapath struct{ dataplane.Datapath }

// TestHandOverConnection: a command that deletes a link's connection and creates
// another link to the same endpoint (what the CP sends after a restart, when links come
// back under new ids) hands the connection over: no disconnect, no dial, its
// subscriptions kept under the new link. A link deleted and created again under its own
// id is dialled again, and so is everything on a datapath that cannot relink.
func TestHandOverConnection(t *testing.T) {
	for _, relinker := range []bool{true, false} {
		t.Run(map[bool]string{true: "relinker", false: "plain"}[relinker], func(t *testing.T) {
			f := newFixture(t, func(_ *cpPeer, c *dataplane.Config) {
				if !relinker {
					c.Datapath = plainDatapath{c.Datapath}
				}
			})
			ps := f.peer.next(f.ctx)
			ps.command(f.ctx, &controllerv1.ConfigCommand{
				ConnectionsToCreate: []*controllerv1.Connection{conn("old", "10.0.0.1:1")},
				SubscriptionsToSet:  []*controllerv1.Subscription{sub("old", "a", "b", "c")},
			})
			before := len(f.dp.Ops())
			ack := ps.command(f.ctx, &controllerv1.ConfigCommand{
				ConnectionsToDelete: []string{"old"},
				ConnectionsToCreate: []*controllerv1.Connection{conn("new", "10.0.0.1:1")},
			})
			if cs := connStatuses(ack); !cs["old"].ok || !cs["new"].ok {
				t.Fatalf("statuses %v", cs)
			}
			ops := f.dp.Ops()[before:]
			conns := f.dp.Connections()
			if len(conns) != 1 || conns[0].LinkID != "new" {
				t.Fatalf("datapath connections %+v", conns)
			}
			entries := ps.connections(f.ctx)
			if len(entries) != 1 || entries[0].GetLinkId() != "new" {
				t.Fatalf("connection list %v", entries)
			}
			subs := ps.subscriptions(f.ctx)
			if relinker {
				if want := []string{"relink old new"}; !slices.Equal(ops, want) {
					t.Fatalf("ops %q, want %q", ops, want)
				}
				if len(subs) != 1 || subs[0].GetLinkId() != "new" {
					t.Fatalf("subscriptions after the handover %v, want a/b/c over new", subs)
				}
			} else {
				if want := []string{"disconnect old", "connect new 10.0.0.1:1"}; !slices.Equal(ops, want) {
					t.Fatalf("ops %q, want %q", ops, want)
				}
				if len(subs) != 0 {
					t.Fatalf("subscriptions %v survived a closed connection", subs)
				}
			}

			// Deleted and created under the same id: the CP thinks it broken, so it is
			// dialled again.
			before = len(f.dp.Ops())
			ps.command(f.ctx, &controllerv1.ConfigCommand{
				ConnectionsToDelete: []string{"new"},
				ConnectionsToCreate: []*controllerv1.Connection{conn("new", "10.0.0.1:1")},
			})
			if ops, want := f.dp.Ops()[before:], []string{"disconnect new", "connect new 10.0.0.1:1"}; !slices.Equal(ops, want) {
				t.Fatalf("recreate ops %q, want %q", ops, want)
			}
		})
	}
}
