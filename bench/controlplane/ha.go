package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/leader"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

// The ha scenario: a 3-member etcd cluster in this process, two control-plane
// replicas on it, each a child process (this program run again with childEnv set),
// and the fleet, every node given both replicas' addresses. After the names
// scenario has converged, the leader is SIGKILLed; it reports the time until the
// standby leads (its election key is the oldest: the lease TTL, at most, plus the
// campaign) and until every link and route is Applied again with the fleet
// registered to it.

const childEnv = "SWITCHBOARD_BENCH_CP_CONFIG"

// childProfileEnv, when set, makes each replica write a CPU profile of its life
// (one stopped by SIGTERM) to the value plus its pid.
const childProfileEnv = "SWITCHBOARD_BENCH_CP_PROFILE"

// childCP runs one control-plane replica for the ha scenario and prints its
// southbound address; SIGTERM stops it.
func childCP(path string) int {
	if prof := os.Getenv(childProfileEnv); prof != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", prof, os.Getpid()))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, server.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("southbound %s northbound %s\n", srv.SouthboundAddr(), srv.NorthboundAddr())
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type haReplica struct {
	cmd          *exec.Cmd
	south, north string
	done         chan struct{}
}

func startReplica(ctx context.Context, cfgPath string) (*haReplica, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+cfgPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &haReplica{cmd: cmd, done: make(chan struct{})}
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "southbound" {
				addrs <- []string{f[1], f[3]}
			}
		}
		_ = cmd.Wait()
		close(r.done)
	}()
	select {
	case a := <-addrs:
		r.south, r.north = a[0], a[1]
		return r, nil
	case <-r.done:
		return nil, errors.New("control-plane replica exited before serving")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

func (r *haReplica) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// haRun is one ha run: two measures, takeover and re-convergence.
func haRun(ctx context.Context, c options) []measure {
	base := measure{store: "etcd", nodes: c.nodes, groups: c.groups, goal: c.leaseTTL + 5*time.Second}
	fail := func(err error) []measure { base.scenario, base.failed = "ha-takeover", err; return []measure{base} }
	dir, err := os.MkdirTemp("", "switchboard-cp-bench-ha-")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cluster, err := embedetcd.Start(ctx, embedetcd.Options{Members: 3, Dir: dir, Fsync: c.fsync, Configure: func(e *embed.Config) {
		e.MaxTxnOps, e.MaxRequestBytes = uint(c.maxTxnOps), 64<<20
	}})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = cluster.Close() }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = cli.Close() }()
	eps, _ := json.Marshal(cluster.Endpoints())
	cfgPath := filepath.Join(dir, "cp.yaml")
	cfg := fmt.Sprintf("northbound: {endpoint: \"127.0.0.1:0\"}\nsouthbound: {endpoint: \"127.0.0.1:0\"}\n"+
		"database:\n  type: etcd\n  etcd: {endpoints: %s, prefix: /bench/, lease_ttl: %s}\n"+
		"reconciler: {workers: %d, base_retry_delay: %s}\n", eps, c.leaseTTL, c.workers, c.baseDelay)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return fail(err)
	}
	var reps []*haReplica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	for range 2 {
		r, err := startReplica(ctx, cfgPath)
		if err != nil {
			return fail(err)
		}
		reps = append(reps, r)
	}
	lead, _, err := awaitLeader(ctx, cli, reps, nil)
	if err != nil {
		return fail(err)
	}
	if err := hubSegmentNB(ctx, lead.north, c.groups); err != nil {
		return fail(err)
	}
	view, err := cpetcd.Open(ctx, cpetcd.Options{Client: cli, Prefix: "/bench/", RequireLeader: true})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = view.Close() }()
	fabric := cpharness.NewFabric()
	defer fabric.Close()
	var nodes []*cpharness.Node
	for i := range c.nodes {
		n, err := fabric.Start(cpharness.NodeConfig{Group: groupName(i % c.groups), ID: fmt.Sprintf("n%03d", i/c.groups),
			Targets: []string{reps[0].south, reps[1].south}, DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
			Backoff: dataplane.Backoff{Base: 100 * time.Millisecond, Max: time.Second, HealthyAfter: 10 * time.Second}, NoOpLog: true})
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}
	if err := fabric.WaitRegistered(ctx); err != nil {
		return fail(err)
	}
	for g := range c.groups {
		if err := nodes[g].Announce(dataplane.NewName("org", "bench", groupName(g))); err != nil {
			return fail(err)
		}
	}
	links, routes := c.groups-1, c.groups*(c.groups-1)
	if err := haConverged(ctx, view, nodes, links, routes); err != nil {
		return fail(fmt.Errorf("before the kill: %w", err))
	}
	load := loadAvg()
	rev0 := revision(ctx, cli)
	_ = lead.cmd.Process.Kill()
	<-lead.done
	killed := time.Now()
	if _, _, err = awaitLeader(ctx, cli, reps, lead); err != nil {
		return fail(err)
	}
	takeover := time.Since(killed)
	err = haConverged(ctx, view, nodes, links, routes)
	reconverge := time.Since(killed)
	load += " → " + loadAvg()
	txns := revision(ctx, cli) - rev0 // every etcd write is one revision
	t, r := base, base
	t.scenario, t.converge, t.load, t.links, t.routes = "ha-takeover", takeover, load, links, routes
	r.scenario, r.converge, r.load, r.links, r.routes, r.failed = "ha-reconverge", reconverge, load, links, routes, err
	r.goal = base.goal + 5*time.Second // the takeover's, then the restart scenario's
	if err == nil {
		r.verified = cpharness.Converged(ctx, view, fabric, true)
	}
	fmt.Fprintf(os.Stderr, "ha: takeover %s, re-converged %s after the SIGKILL (%v), %d etcd write transactions, load %s\n",
		takeover.Round(time.Millisecond), reconverge.Round(time.Millisecond), err, txns, load)
	return []measure{t, r}
}

// awaitLeader waits until one of reps other than not leads by etcd's election key.
func awaitLeader(ctx context.Context, cli *clientv3.Client, reps []*haReplica, not *haReplica) (*haReplica, int64, error) {
	for {
		resp, err := cli.Get(ctx, "/bench/election/", clientv3.WithFirstCreate()...)
		if err == nil && len(resp.Kvs) > 0 {
			var info leader.Info
			if json.Unmarshal(resp.Kvs[0].Value, &info) == nil {
				for _, r := range reps {
					if r != not && r.south == info.Southbound {
						return r, resp.Kvs[0].CreateRevision, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// hubSegmentNB links group 0 to every group through the leader's northbound API,
// retrying while the leader is still taking over.
func hubSegmentNB(ctx context.Context, addr string, groups int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	nb := controlplanev1.NewControlPlaneServiceClient(conn)
	for {
		_, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "hub"})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "hub", GroupA: groupName(0), GroupB: "*"})
	return err
}

// haConverged waits until the store holds exactly links and routes, all Applied and
// claimed, with every node registered.
func haConverged(ctx context.Context, view store.Store, nodes []*cpharness.Node, links, routes int) error {
	for {
		t0 := time.Now()
		ls, err := view.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
		if err != nil {
			return err
		}
		rs, err := view.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted, ExpansionsOnly: true})
		if err != nil {
			return err
		}
		if settled(ls, rs) && len(ls) == links && len(rs) == routes && allRegistered(nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not converged (%d links, %d routes, settled %v, all registered %v): %w",
				len(ls), len(rs), settled(ls, rs), allRegistered(nodes), ctx.Err())
		// A poll re-reads every record from etcd in this process, beside the fleet:
		// the pause keeps it under a ninth of the time, as the other scenarios do.
		case <-time.After(max(10*time.Millisecond, 8*time.Since(t0))):
		}
	}
}

func settled(ls []store.Link, rs []store.Route) bool {
	for _, l := range ls {
		if l.Status != store.LinkApplied || l.DestNodeID == "" || l.Deleted {
			return false
		}
	}
	for _, r := range rs {
		if r.Status != store.RouteApplied || r.Deleted {
			return false
		}
	}
	return true
}

func allRegistered(nodes []*cpharness.Node) bool {
	for _, n := range nodes {
		if c := n.Controller(); c == nil || !c.Registered() {
			return false
		}
	}
	return true
}

// revision is etcd's current revision (0 when it cannot be read).
func revision(ctx context.Context, cli *clientv3.Client) int64 {
	resp, err := cli.Get(ctx, "/bench/meta/term")
	if err != nil {
		return 0
	}
	return resp.Header.Revision
}
