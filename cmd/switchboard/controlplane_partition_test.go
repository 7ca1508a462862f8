package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/leader"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// partitionTTL is the replicas' election lease: short, so that a takeover is quick.
const partitionTTL = 2 * time.Second

// partitionEtcdEnv makes this test binary the etcd process of the partition test
// (TestControlplanePartitionEtcdProcess), with its data in the directory it names.
const partitionEtcdEnv = "SWITCHBOARD_TEST_PARTITION_ETCD_DIR"

// TestControlplanePartitionEtcdProcess is not a test of its own: run by the
// partition test as a child process (partitionEtcdEnv set), it serves one etcd
// member, prints "etcd-endpoint URL", and stops when its stdin closes — so etcd is a
// process of its own, as deployments run it, and dies with the test.
func TestControlplanePartitionEtcdProcess(t *testing.T) {
	dir := os.Getenv(partitionEtcdEnv)
	if dir == "" {
		t.Skip("the etcd process of TestControlplanePartitionLeaderFromEtcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, Configure: func(c *embed.Config) { c.MaxTxnOps = 10000 }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Printf("etcd-endpoint %s\n", c.Endpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startEtcdProcess runs TestControlplanePartitionEtcdProcess in a child of this
// test binary and returns its client URL.
func startEtcdProcess(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestControlplanePartitionEtcdProcess$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), partitionEtcdEnv+"="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	endpoint := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if ep, ok := strings.CutPrefix(sc.Text(), "etcd-endpoint "); ok {
				endpoint <- ep
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case ep := <-endpoint:
		return ep
	case <-done:
		t.Fatalf("etcd process exited: %s", stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("etcd process: no endpoint within 30s: %s", stderr)
	}
	return ""
}

// partitionReplica is a `switchboard controlplane` process on etcd, reaching it
// through a proxy of the test's own.
type partitionReplica struct {
	name         string
	north, south string
	proxy        *partitionProxy
	cmd          *exec.Cmd
	stderr       *syncbuf.Buffer
	done         chan struct{}
	exitedAt     time.Time // set before done closes
}

func startPartitionReplica(t *testing.T, name, etcdEndpoint, prefix string) *partitionReplica {
	t.Helper()
	r := &partitionReplica{name: name, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	r.proxy = startPartitionProxy(t, strings.TrimPrefix(etcdEndpoint, "http://"))
	cfg := filepath.Join(t.TempDir(), "controlplane.yaml")
	// reconcile_period: every second the leader sweeps every node (asks it for its
	// connections): a steady flow of commands, so that the test sees when it stops.
	body := fmt.Sprintf(`northbound:
  endpoint: "127.0.0.1:0"
southbound:
  endpoint: "127.0.0.1:0"
database:
  type: etcd
  etcd:
    endpoints: [%q]
    prefix: %q
    lease_ttl: %s
reconciler:
  base_retry_delay: "10ms"
  reconcile_period: "1s"
`, r.proxy.Addr(), prefix, partitionTTL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "controlplane", "--config", cfg, "--metrics-listen", "", "--log-level", "info")
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	addrs := make(chan [2]string, 1)
	go func() {
		var north string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch f := strings.Fields(sc.Text()); {
			case len(f) == 2 && f[0] == "northbound":
				north = f[1]
			case len(f) == 2 && f[0] == "southbound":
				addrs <- [2]string{north, f[1]}
			}
		}
		_ = cmd.Wait()
		r.exitedAt = time.Now()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("replica %s stderr:\n%s", name, r.stderr)
		}
	})
	select {
	case a := <-addrs:
		r.north, r.south = a[0], a[1]
	case <-r.done:
		t.Fatalf("replica %s exited: %s", name, r.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s: no addresses within 30s: %s", name, r.stderr)
	}
	return r
}

func (r *partitionReplica) northbound(t *testing.T) controlplanev1.ControlPlaneServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(r.north, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return controlplanev1.NewControlPlaneServiceClient(cc)
}

var leaderLogAt = regexp.MustCompile(`msg="(leadership acquired|stopped leading)[^"]*".* at=(\d+)`)

// loggedAt returns the time in the first log line whose message starts with msg.
func (r *partitionReplica) loggedAt(msg string) (time.Time, bool) {
	for _, m := range leaderLogAt.FindAllStringSubmatch(r.stderr.String(), -1) {
		if m[1] == msg {
			n, _ := strconv.ParseInt(m[2], 10, 64)
			return time.Unix(0, n), true
		}
	}
	return time.Time{}, false
}

// commandLog records, at the data-plane nodes, every message a control plane sent
// on a node's control stream (commands, requests, answers) and every end of such a
// stream: which replica it came from (the address the node dialled) and when.
type commandLog struct {
	mu     sync.Mutex
	events []commandEvent
}

type commandEvent struct {
	node, from string
	at         time.Time
	kind       string // the payload's type, or "end" when the stream ended
}

// dialOption is the node's stream interceptor that records.
func (l *commandLog) dialOption(node string) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption,
	) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != controllerv1.ControllerService_OpenControlChannel_FullMethodName {
			return cs, err
		}
		return &recordingStream{ClientStream: cs, l: l, node: node, from: cc.Target()}, nil
	})
}

func (l *commandLog) add(e commandEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *commandLog) snapshot() []commandEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]commandEvent(nil), l.events...)
}

type recordingStream struct {
	grpc.ClientStream
	l          *commandLog
	node, from string
	registered bool // a refused stream (a standby's) carried no command
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	now := time.Now()
	if err != nil {
		if s.registered {
			s.l.add(commandEvent{node: s.node, from: s.from, at: now, kind: "end"})
		}
		return err
	}
	s.registered = true
	kind := "?"
	if msg, ok := m.(*controllerv1.ControlMessage); ok {
		kind = strings.TrimPrefix(fmt.Sprintf("%T", msg.GetPayload()), "*controllerv1.ControlMessage_")
	}
	s.l.add(commandEvent{node: s.node, from: s.from, at: now, kind: kind})
	return nil
}

// awaitElected waits until etcd names one of rs as the leader, and returns it and
// its term (the election key's create revision).
func awaitElected(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, d time.Duration, rs ...*partitionReplica) (*partitionReplica, int64) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := cli.Get(ctx, prefix+"election/", clientv3.WithFirstCreate()...)
		if err == nil && len(resp.Kvs) > 0 {
			var info leader.Info
			if json.Unmarshal(resp.Kvs[0].Value, &info) == nil {
				for _, r := range rs {
					if r.south == info.Southbound {
						return r, resp.Kvs[0].CreateRevision
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("none of the replicas is elected within %s (%v)", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partitionWait polls check every 50 ms until it returns nil, for at most d.
func partitionWait(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionConverged: every node is connected to the replica nb talks to, both
// links are Applied, and each edge node holds exactly one connection, to cloud/n1.
func partitionConverged(ctx context.Context, nb controlplanev1.ControlPlaneServiceClient, f *cpharness.Fabric) error {
	nodes, err := nb.ListNodes(ctx, &controlplanev1.ListNodesRequest{})
	if err != nil {
		return err
	}
	connected := 0
	for _, n := range nodes.GetNodes() {
		if n.GetConnected() {
			connected++
		}
	}
	if connected != len(f.Nodes()) {
		return fmt.Errorf("%d of %d nodes connected", connected, len(f.Nodes()))
	}
	links, err := nb.ListLinks(ctx, &controlplanev1.ListLinksRequest{})
	if err != nil {
		return err
	}
	applied := 0
	for _, l := range links.GetLinks() {
		if l.GetStatus() == "applied" {
			applied++
		}
	}
	if applied != 2 || len(links.GetLinks()) != 2 {
		return fmt.Errorf("links %v: want 2, both applied", links.GetLinks())
	}
	return edgeConnections(f)
}

// edgeConnections: each edge node holds exactly one link connection, to cloud/n1.
func edgeConnections(f *cpharness.Fabric) error {
	cloud := f.Node("cloud/n1").External()
	for _, id := range []string{"edge-a/n1", "edge-b/n1"} {
		var eps []string
		for _, c := range f.Node(id).Datapath().Connections() {
			if !c.Inbound && c.LinkID != "" {
				eps = append(eps, c.Endpoint)
			}
		}
		if len(eps) != 1 || eps[0] != cloud {
			return fmt.Errorf("%s is connected to %v, want exactly [%s]", id, eps, cloud)
		}
	}
	return nil
}

// dialCount counts the connects each node's datapath made.
func dialCount(f *cpharness.Fabric) map[string]int {
	out := map[string]int{}
	for _, n := range f.Nodes() {
		for _, op := range n.Datapath().Ops() {
			if strings.HasPrefix(op, "connect ") {
				out[n.ID()]++
			}
		}
	}
	return out
}

// termWrite is one etcd revision under the prefix that is not the election's:
// one store commit, attributed to the term it stamped.
type termWrite struct {
	rev  int64
	term int64 // 0: no term stamped (an unattributed write)
	keys []string
}

// storeWrites lists the store's commits after rev, up to etcd's revision now.
func storeWrites(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, rev int64) []termWrite {
	t.Helper()
	now, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	end := now.Header.Revision
	if end <= rev {
		return nil
	}
	byRev := map[int64]*termWrite{}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for resp := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			t.Fatal(resp.Err())
		}
		last := int64(0)
		for _, ev := range resp.Events {
			key := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			last = ev.Kv.ModRevision
			if strings.HasPrefix(key, "election/") {
				continue // campaigns and expired leases, not the store's writes
			}
			w := byRev[ev.Kv.ModRevision]
			if w == nil {
				w = &termWrite{rev: ev.Kv.ModRevision}
				byRev[w.rev] = w
			}
			if key == cpetcd.TermKey && ev.Type == clientv3.EventTypePut {
				w.term, _ = strconv.ParseInt(string(ev.Kv.Value), 10, 64)
				continue
			}
			w.keys = append(w.keys, key)
		}
		if last >= end || resp.Header.Revision >= end {
			break
		}
	}
	out := make([]termWrite, 0, len(byRev))
	for _, w := range byRev {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rev < out[j].rev })
	return out
}

// TestControlplanePartitionLeaderFromEtcd: etcd runs as a process, two control-plane
// replicas as processes each reach it through a proxy of the test's, and three
// data-plane nodes (in this process) hold both replicas' addresses. The leader's
// proxy is black-holed — its etcd connections stay open and deliver nothing — while
// a northbound write to it is in flight; the other replica takes over; then the
// partition heals and the held bytes (that write's Txn among them) reach etcd late.
// Shown:
//
//	(a) the store holds no write of the old leader's term after the new leader's first
//	    write (every commit stamps PREFIX/meta/term with the term it is fenced on, so
//	    etcd's history attributes each commit), and none unattributed;
//	(b) at the nodes, the old leader's last message precedes the new leader's first,
//	    node by node and over all nodes;
//	(c) the old leader stops acting — its last message to a node, its streams closed —
//	    within its lease TTL of losing etcd, and before the new leader is elected;
//
// and the nodes keep their link connections through the partition and after the
// heal: none is dialled again, none duplicated.
func TestControlplanePartitionLeaderFromEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	etcdURL := startEtcdProcess(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const prefix = "/partition/"
	a := startPartitionReplica(t, "a", etcdURL, prefix)
	b := startPartitionReplica(t, "b", etcdURL, prefix)
	old, oldTerm := awaitElected(t, ctx, cli, prefix, 20*time.Second, a, b)
	standby := b
	if old == b {
		standby = a
	}
	nb := old.northbound(t)
	// The election key is written before the replica has taken the store's lead.
	partitionWait(t, 10*time.Second, "segment added on the leader", func() error {
		_, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "main"})
		return err
	})
	if _, err := nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "main", GroupA: "cloud", GroupB: "*"}); err != nil {
		t.Fatal(err)
	}

	cmds := &commandLog{}
	f := cpharness.NewFabric()
	t.Cleanup(f.Close)
	for i, n := range []cpharness.NodeConfig{
		{Group: "cloud", ID: "n1"}, {Group: "edge-a", ID: "n1", NoExternal: true}, {Group: "edge-b", ID: "n1", NoExternal: true},
	} {
		n.Targets = []string{old.south, standby.south}
		if i%2 == 1 { // sent on to the leader by the standby
			n.Targets = []string{standby.south, old.south}
		}
		n.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), cmds.dialOption(n.Group + "/" + n.ID)}
		if _, err := f.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Node("edge-a/n1").Announce(dataplane.Name{Components: [3]string{"org", "ns", "svc"}}); err != nil {
		t.Fatal(err)
	}
	partitionWait(t, 15*time.Second, "converged on the first leader", func() error { return partitionConverged(ctx, nb, f) })
	dialsBefore := dialCount(f)
	start, err := cli.Get(ctx, prefix+cpetcd.TermKey)
	if err != nil || len(start.Kvs) != 1 || string(start.Kvs[0].Value) != strconv.FormatInt(oldTerm, 10) {
		t.Fatalf("term key before the partition: %v, %v; want %d", start, err, oldTerm)
	}

	// The partition. A write is then sent to the old leader: its Txn goes into the
	// black hole, to reach etcd only after the heal.
	old.proxy.BlackHole()
	cutAt := time.Now()
	lateWrite := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		_, err := nb.AddSegment(wctx, &controlplanev1.SegmentRequest{Name: "written-by-the-partitioned-leader"})
		lateWrite <- err
	}()

	// Through the partition the nodes keep their link connections.
	select {
	case <-old.done:
		t.Logf("old leader %s exited %s after the partition", old.name, old.exitedAt.Sub(cutAt).Round(time.Millisecond))
	case <-time.After(partitionTTL + 5*time.Second):
		// It must give up leading and exit, to be restarted as a standby.
		_ = old.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, to the log
		t.Errorf("the leader partitioned from etcd still runs %s later", partitionTTL+5*time.Second)
	}
	if err := edgeConnections(f); err != nil {
		t.Fatalf("partitioned: the nodes lost their links: %v", err)
	}
	newLeader, newTerm := awaitElected(t, ctx, cli, prefix, partitionTTL+5*time.Second, standby)
	if newTerm <= oldTerm {
		t.Fatalf("new term %d is not after the old %d", newTerm, oldTerm)
	}
	partitionWait(t, 15*time.Second, "converged on the new leader", func() error {
		return partitionConverged(ctx, newLeader.northbound(t), f)
	})
	// The new leader has written (its takeover); now the partition heals and what the
	// old leader sent into it arrives.
	old.proxy.Release()
	healedAt := time.Now()
	if old.proxy.released.Load() == 0 {
		t.Fatal("nothing the old leader sent during the partition was held: the partition was not exercised")
	}
	time.Sleep(partitionLinger) // the late bytes are read and acted on meanwhile
	select {
	case err := <-lateWrite:
		if err == nil {
			t.Errorf("the partitioned leader acknowledged a write")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the northbound write to the partitioned leader got no answer")
	}

	// (a) the store's history, commit by commit.
	writes := storeWrites(t, ctx, cli, prefix, start.Header.Revision)
	firstNew, lastOld := int64(0), int64(0)
	for _, w := range writes {
		switch w.term {
		case 0:
			t.Errorf("etcd revision %d writes %v without a term stamped: unattributed", w.rev, w.keys)
		case newTerm:
			if firstNew == 0 {
				firstNew = w.rev
			}
		case oldTerm:
			lastOld = w.rev
		default:
			t.Errorf("etcd revision %d is stamped with term %d, neither the old %d nor the new %d", w.rev, w.term, oldTerm, newTerm)
		}
	}
	t.Logf("store commits after the partition: %d; old term's last at rev %d, new term's first at rev %d; %d bytes delivered late",
		len(writes), lastOld, firstNew, old.proxy.released.Load())
	if firstNew == 0 {
		t.Fatal("the new leader wrote nothing")
	}
	if lastOld > firstNew {
		for _, w := range writes {
			if w.term == oldTerm && w.rev > firstNew {
				t.Errorf("(a) a deposed leader's write landed: etcd revision %d (term %d) writes %v, after the new leader's first write at %d",
					w.rev, w.term, w.keys, firstNew)
			}
		}
	}
	if resp, err := cli.Get(ctx, prefix+"segments/written-by-the-partitioned-leader"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("(a) the partitioned leader's late write is in etcd: %v, %v", resp, err)
	}

	// (b) and (c): what the nodes received, from whom, and when.
	var lastFromOld, firstFromNew, oldStreamsClosed time.Time
	lastOldByNode, firstNewByNode := map[string]time.Time{}, map[string]time.Time{}
	for _, e := range cmds.snapshot() {
		switch {
		case e.from == old.south && e.kind == "end":
			if e.at.After(oldStreamsClosed) {
				oldStreamsClosed = e.at
			}
		case e.from == old.south:
			if e.at.After(lastFromOld) {
				lastFromOld = e.at
			}
			if e.at.After(lastOldByNode[e.node]) {
				lastOldByNode[e.node] = e.at
			}
		case e.from == newLeader.south && e.kind != "end":
			if firstFromNew.IsZero() || e.at.Before(firstFromNew) {
				firstFromNew = e.at
			}
			if f, ok := firstNewByNode[e.node]; !ok || e.at.Before(f) {
				firstNewByNode[e.node] = e.at
			}
		}
	}
	stoppedAt, ok := old.loggedAt("stopped leading")
	if !ok {
		t.Fatalf("the old leader did not log that it stopped leading")
	}
	electedAt, ok := newLeader.loggedAt("leadership acquired")
	if !ok {
		t.Fatalf("the new leader did not log that it was elected")
	}
	stoppedActing := lastFromOld
	if oldStreamsClosed.After(stoppedActing) {
		stoppedActing = oldStreamsClosed
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("after losing etcd, the old leader sent its last node message at +%s, its node streams were closed by +%s, it logged stopping at +%s; "+
		"the new leader was elected at +%s and sent its first node message at +%s (lease TTL %s); the fabric healed at +%s; whole test %s",
		ms(lastFromOld.Sub(cutAt)), ms(oldStreamsClosed.Sub(cutAt)), ms(stoppedAt.Sub(cutAt)), ms(electedAt.Sub(cutAt)),
		ms(firstFromNew.Sub(cutAt)), partitionTTL, ms(healedAt.Sub(cutAt)), ms(time.Since(began)))
	if lastFromOld.IsZero() || firstFromNew.IsZero() || oldStreamsClosed.IsZero() {
		t.Fatalf("the nodes did not hear from both leaders: last from the old %v, first from the new %v, old streams closed %v",
			lastFromOld, firstFromNew, oldStreamsClosed)
	}
	// (b)
	if !lastFromOld.Before(firstFromNew) {
		t.Errorf("(b) the leaders overlap at the nodes: the old leader's last message at +%s, the new leader's first at +%s",
			ms(lastFromOld.Sub(cutAt)), ms(firstFromNew.Sub(cutAt)))
	}
	for node, first := range firstNewByNode {
		if last, ok := lastOldByNode[node]; ok && !last.Before(first) {
			t.Errorf("(b) %s heard from the old leader at +%s, after the new leader's first message at +%s",
				node, ms(last.Sub(cutAt)), ms(first.Sub(cutAt)))
		}
	}
	// (c) within its lease TTL of losing etcd — and, what correctness needs, before
	// the new leader was elected.
	if bound := partitionTTL; stoppedActing.Sub(cutAt) > bound {
		t.Errorf("(c) the old leader acted until +%s after losing etcd, later than its lease could expire (+%s)", ms(stoppedActing.Sub(cutAt)), bound)
	}
	if !stoppedActing.Before(electedAt) || !stoppedAt.Before(electedAt) {
		t.Errorf("(c) the old leader stopped acting at +%s (logged +%s), not before the new leader was elected at +%s",
			ms(stoppedActing.Sub(cutAt)), ms(stoppedAt.Sub(cutAt)), ms(electedAt.Sub(cutAt)))
	}

	// The data plane after the heal: no link dialled again, none duplicated.
	if err := edgeConnections(f); err != nil {
		t.Errorf("after the heal: %v", err)
	}
	if after := dialCount(f); fmt.Sprint(after) != fmt.Sprint(dialsBefore) {
		t.Errorf("links were dialled again across the partition: connects before %v, after %v", dialsBefore, after)
	}
}
