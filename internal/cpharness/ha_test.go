package cpharness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/leader"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

// haTTL is the election lease of the HA tests: short, so that a takeover is quick.
const haTTL = 2 * time.Second

var haPrefixes atomic.Int64

// haFixture is a 3-member etcd cluster (in this process) and control-plane replicas
// (processes of their own) on it. Each replica reaches each member through a proxy of
// its own, so that a test can cut one replica off from etcd.
type haFixture struct {
	etcd   *embedetcd.Cluster
	cli    *clientv3.Client
	prefix string
}

func newHA(t *testing.T) *haFixture {
	t.Helper()
	c := embedetcd.New(t, embedetcd.Options{Members: 3, Configure: func(c *embed.Config) { c.MaxTxnOps = 10000 }})
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &haFixture{etcd: c, cli: cli, prefix: fmt.Sprintf("/ha-%d/", haPrefixes.Add(1))}
}

type replica struct {
	*cpProcess
	proxies []*proxy
}

// start runs a replica and waits until it serves (as leader or standby).
func (h *haFixture) start(t *testing.T) *replica {
	t.Helper()
	r := &replica{}
	var eps []string
	for _, ep := range h.etcd.Endpoints() {
		p := startProxy(t, strings.TrimPrefix(ep, "http://"))
		r.proxies = append(r.proxies, p)
		eps = append(eps, p.Addr())
	}
	quoted, _ := json.Marshal(eps)
	r.cpProcess = startCPProcessWith(t, fmt.Sprintf(`northbound:
  endpoint: "127.0.0.1:0"
southbound:
  endpoint: "127.0.0.1:0"
database:
  type: etcd
  etcd:
    endpoints: %s
    prefix: %q
    lease_ttl: %s
reconciler:
  base_retry_delay: "10ms"
  reconcile_period: "0s"
`, quoted, h.prefix, haTTL))
	return r
}

// leader returns the leader's election value as etcd holds it (ok false: none).
func (h *haFixture) leader(ctx context.Context) (leader.Info, int64, bool) {
	resp, err := h.cli.Get(ctx, h.prefix+"election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return leader.Info{}, 0, false
	}
	var info leader.Info
	if json.Unmarshal(resp.Kvs[0].Value, &info) != nil {
		return leader.Info{}, 0, false
	}
	return info, resp.Kvs[0].CreateRevision, true
}

// awaitLeader waits until one of rs leads (by the etcd key and by its refusing
// nothing), within d, and returns it and its election revision.
func (h *haFixture) awaitLeader(t *testing.T, ctx context.Context, d time.Duration, rs ...*replica) (*replica, int64) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var found *replica
	var rev int64
	err := Eventually(dctx, func() error {
		info, r, ok := h.leader(dctx)
		if !ok {
			return errors.New("no leader")
		}
		for _, c := range rs {
			if c.south == info.Southbound {
				found, rev = c, r
				return nil
			}
		}
		return fmt.Errorf("leader %s is none of the replicas", info.Southbound)
	})
	if err != nil {
		t.Fatalf("no replica leads within %s: %v", d, err)
	}
	return found, rev
}

func other(r, a, b *replica) *replica {
	if r == a {
		return b
	}
	return a
}

// haFabric starts the restart test's fabric (cloud linked to every group), each
// node given both replicas' addresses — half of them the standby's first, so that
// they are sent on to the leader — and converges it.
func haFabric(t *testing.T, ctx context.Context, lead, standby *replica) (*Fabric, map[string]bool) {
	t.Helper()
	nb := lead.northbound(t)
	// The election key is written before the replica has taken over the store and
	// opened its gates: until then it refuses writes like a standby.
	err := Eventually(ctx, func() error {
		_, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "main"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "main", GroupA: "cloud", GroupB: "*"}); err != nil {
		t.Fatal(err)
	}
	f := newFabric(t)
	for i, n := range []NodeConfig{
		{Group: "cloud", ID: "n1"}, {Group: "cloud", ID: "n2", NoExternal: true},
		{Group: "edge-a", ID: "n1", NoExternal: true},
		{Group: "edge-b", ID: "n1", NoExternal: true}, {Group: "edge-b", ID: "n2", NoExternal: true},
		{Group: "edge-c", ID: "n1"}, {Group: "edge-c", ID: "n2"},
	} {
		n.Targets = []string{lead.south, standby.south}
		if i%2 == 0 {
			n.Targets = []string{standby.south, lead.south}
		}
		n.Logger = testLogger()
		if _, err := f.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"edge-a/n1", "edge-c/n1"} {
		if err := f.Node(id).Announce(svcName); err != nil {
			t.Fatal(err)
		}
	}
	return f, convergeProcess(t, ctx, nb, f, nil, "")
}

// checkNotRedialled fails for every endpoint a node was connected to before and is
// again after, but dialled in between.
func checkNotRedialled(t *testing.T, f *Fabric, dialsBefore map[string]map[string]int, outBefore map[string]map[string]bool) {
	t.Helper()
	dialsAfter, outAfter := dials(f), outgoing(f)
	kept := 0
	for node, eps := range outAfter {
		for ep := range eps {
			if !outBefore[node][ep] {
				continue
			}
			kept++
			if dialsAfter[node][ep] != dialsBefore[node][ep] {
				t.Errorf("%s dialled %s, which it was connected to before the takeover, again: %d dials before, %d after",
					node, ep, dialsBefore[node][ep], dialsAfter[node][ep])
			}
		}
	}
	if kept == 0 {
		t.Fatalf("no node dials the same endpoint after the takeover: before %v, after %v", outBefore, outAfter)
	}
}

// checkStandby: the standby refuses a node's stream with Unavailable naming the
// leader, serves northbound reads, and refuses northbound writes naming the leader.
func checkStandby(t *testing.T, ctx context.Context, standby, lead *replica) {
	t.Helper()
	conn, err := grpc.NewClient(standby.south, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := controllerv1.NewControllerServiceClient(conn).OpenControlChannel(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable || dataplane.LeaderHint(err) != lead.south {
		t.Fatalf("standby's southbound: %v (hint %q), want Unavailable naming %s", err, dataplane.LeaderHint(err), lead.south)
	}
	nb := standby.northbound(t)
	segs, err := nb.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
	if err != nil || len(segs.GetSegments()) != 1 {
		t.Fatalf("standby's northbound read: %v, %v; want the leader's segment", segs, err)
	}
	_, err = nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "other"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), lead.north) {
		t.Fatalf("standby's northbound write: %v, want FailedPrecondition naming %s", err, lead.north)
	}
}

// TestHAKillLeader: the leader is SIGKILLed; the standby leads within the lease TTL
// and 5 s, every node reconnects to it, every link and route is Applied again with
// one connection per link, and no connection that was up is dialled again.
func TestHAKillLeader(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	h := newHA(t)
	a, b := h.start(t), h.start(t)
	lead, _ := h.awaitLeader(t, ctx, 30*time.Second, a, b)
	standby := other(lead, a, b)
	f, before := haFabric(t, ctx, lead, standby)
	checkStandby(t, ctx, standby, lead)
	dialsBefore, outBefore := dials(f), outgoing(f)

	if err := lead.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-lead.done
	killed := time.Now()
	h.awaitLeader(t, ctx, haTTL+5*time.Second, standby)
	took := time.Since(killed)
	convergeProcess(t, ctx, standby.northbound(t), f, before, "")
	t.Logf("takeover %s, re-converged %s after the kill", took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	nodes, err := standby.northbound(t).ListNodes(ctx, &controlplanev1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.GetNodes() {
		if !n.GetConnected() {
			t.Errorf("node %s is not connected to the new leader", n.GetId())
		}
	}
	if len(nodes.GetNodes()) != len(f.Nodes()) {
		t.Errorf("the new leader knows %d nodes, want %d", len(nodes.GetNodes()), len(f.Nodes()))
	}
	checkNotRedialled(t, f, dialsBefore, outBefore)
}

// TestHAEtcdMemberStopped: an etcd member (the raft leader) stops; the control
// plane's leader keeps its lead, writes still commit (a new announcement converges),
// nothing is re-dialled.
func TestHAEtcdMemberStopped(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	h := newHA(t)
	a, b := h.start(t), h.start(t)
	lead, rev := h.awaitLeader(t, ctx, 30*time.Second, a, b)
	f, before := haFabric(t, ctx, lead, other(lead, a, b))
	dialsBefore, outBefore := dials(f), outgoing(f)

	// The raft leader: the cluster elects another while the control plane's lease
	// renewals wait, the hardest stop for it to ride out.
	h.member(t, ctx, true).Stop()
	stopped := time.Now()
	if err := f.Node("edge-b/n1").Announce(dataplane.Name{Components: [3]string{"org", "ns", "other"}}); err != nil {
		t.Fatal(err)
	}
	after := convergeProcess(t, ctx, lead.northbound(t), f, nil, "")
	// Long enough for a lease the stop disturbed to have run out.
	time.Sleep(time.Until(stopped.Add(2 * haTTL)))
	if _, now, ok := h.leader(ctx); !ok || now != rev {
		t.Fatalf("the leadership changed when an etcd member stopped: rev %d -> %d (ok %v)", rev, now, ok)
	}
	for id := range before {
		if !after[id] {
			t.Errorf("link %s was replaced", id)
		}
	}
	checkNotRedialled(t, f, dialsBefore, outBefore)
}

// member returns the raft leader (leader true) or a follower.
func (h *haFixture) member(t *testing.T, ctx context.Context, leader bool) *embedetcd.Member {
	t.Helper()
	for _, m := range h.etcd.Members() {
		st, err := h.cli.Status(ctx, m.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		if (st.Leader == st.Header.MemberId) == leader {
			return m
		}
	}
	t.Fatalf("no etcd member with leader=%v", leader)
	return nil
}

var atRE = regexp.MustCompile(`msg="(leadership acquired|stopped leading)[^"]*".* at=(\d+)`)

// logTime returns the "at" of the first log line with msg, or 0.
func logTime(log, msg string) int64 {
	for _, m := range atRE.FindAllStringSubmatch(log, -1) {
		if m[1] == msg {
			n, _ := strconv.ParseInt(m[2], 10, 64)
			return n
		}
	}
	return 0
}

// TestHALeaderCutOffFromEtcd: the leader loses etcd. It stops reconciling and drops
// its nodes before the standby is elected (its log says when), exits, and no write
// of its term reaches etcd after one of the new leader's: the term stamped on every
// write never goes back in etcd's history. The fabric converges on the new leader.
func TestHALeaderCutOffFromEtcd(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	h := newHA(t)
	a, b := h.start(t), h.start(t)
	lead, oldRev := h.awaitLeader(t, ctx, 30*time.Second, a, b)
	standby := other(lead, a, b)
	f, before := haFabric(t, ctx, lead, standby)
	start, err := h.cli.Get(ctx, h.prefix+cpetcd.TermKey)
	if err != nil || len(start.Kvs) != 1 || string(start.Kvs[0].Value) != strconv.FormatInt(oldRev, 10) {
		t.Fatalf("term key before the cut: %v, %v; want %d", start, err, oldRev)
	}

	for _, p := range lead.proxies {
		p.Cut()
	}
	select {
	case <-lead.done: // it gave up leading, and exited
	case <-time.After(haTTL + 10*time.Second):
		_ = lead.cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		t.Fatalf("the leader cut off from etcd still runs\n%s", lead.stderr())
	}
	_, newRev := h.awaitLeader(t, ctx, haTTL+5*time.Second, standby)
	var ledAt int64
	_ = Eventually(ctx, func() error { // the key is written before the line
		if ledAt = logTime(standby.stderr(), "leadership acquired"); ledAt == 0 {
			return errors.New("not logged yet")
		}
		return nil
	})
	stoppedAt := logTime(lead.stderr(), "stopped leading")
	if stoppedAt == 0 || ledAt == 0 || stoppedAt >= ledAt {
		t.Fatalf("old leader stopped at %d, new leader elected at %d: want the stop first\nold:\n%s", stoppedAt, ledAt, lead.stderr())
	}
	convergeProcess(t, ctx, standby.northbound(t), f, before, "")

	terms := termHistory(t, ctx, h, start.Header.Revision)
	last := oldRev
	for i, term := range terms {
		if term < last {
			t.Fatalf("write %d of the term history %v is by term %d after term %d: a deposed leader's write landed", i, terms, term, last)
		}
		last = term
	}
	if last != newRev {
		t.Fatalf("term history %v does not end with the new leader's term %d", terms, newRev)
	}
}

// termHistory returns every value the term key took since rev.
func termHistory(t *testing.T, ctx context.Context, h *haFixture, rev int64) []int64 {
	t.Helper()
	now, err := h.cli.Get(ctx, h.prefix+cpetcd.TermKey)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []int64
	for resp := range h.cli.Watch(wctx, h.prefix+cpetcd.TermKey, clientv3.WithRev(rev)) {
		for _, ev := range resp.Events {
			n, _ := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
			out = append(out, n)
			if ev.Kv.ModRevision >= now.Kvs[0].ModRevision {
				return out
			}
		}
		if resp.Err() != nil {
			t.Fatal(resp.Err())
		}
	}
	t.Fatal("term history watch ended")
	return nil
}
