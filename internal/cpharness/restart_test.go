package cpharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

func northbound(t *testing.T, c *cp) controlplanev1.ControlPlaneServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(c.NorthboundAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlplanev1.NewControlPlaneServiceClient(conn)
}

// restartCP starts a control plane with cfg on the southbound address the nodes dial,
// retrying while the old socket is released.
func restartCP(t *testing.T, cfg *config.Config, southbound string) *cp {
	t.Helper()
	cfg.Southbound.Endpoint = southbound
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err := net.Listen("tcp", southbound)
		if err == nil {
			lis.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("southbound address %s stays busy: %v", southbound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return startCP(t, cfg)
}

// staleConnections lists the labelled connections whose link is not in the store.
func staleConnections(t *testing.T, f *Fabric, st store.Store) []string {
	t.Helper()
	var out []string
	for _, n := range f.Nodes() {
		for _, c := range n.Datapath().Connections() {
			if _, err := st.GetLink(context.Background(), c.LinkID); err != nil {
				out = append(out, n.ID()+":"+c.LinkID)
			}
		}
	}
	return out
}

// TestRestartAPIModeSQLite: an API mode control plane on SQLite restarts; the
// segments made through the API survive, the nodes reconnect by themselves, and links
// and routes are rebuilt under new ids. Connections the store does not know are
// orphans: all deleted with orphan detection on; with it off those between the
// managed nodes go (only the control plane makes them), and others stay.
func TestRestartAPIModeSQLite(t *testing.T) {
	for _, orphans := range []bool{true, false} {
		name := "orphan-detection-off"
		if orphans {
			name = "orphan-detection-on"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, config.DatabaseSQLite, "")
			cfg.Reconciler.EnableOrphanDetection = orphans
			c := startCP(t, cfg)
			ctx := timeout(t, 60*time.Second)
			nb := northbound(t, c)
			if _, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "main"}); err != nil {
				t.Fatal(err)
			}
			if _, err := nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "main", GroupA: "cloud", GroupB: "*"}); err != nil {
				t.Fatal(err)
			}
			f := newFabric(t)
			startNodes(t, f, c, 2, "cloud", "edge-a", "edge-b")
			announce(t, f, c, "edge-a/n1")
			converge(t, c, f, true)
			old, _ := c.Store().ListLinks(ctx, store.LinkFilter{})
			// A connection some other controller made, to an endpoint no link uses.
			foreign := f.Node("edge-b/n2").Datapath()
			if _, err := foreign.Connect(ctx, "foreign-link", "10.9.9.9:443", []byte("{}")); err != nil {
				t.Fatal(err)
			}

			c.stop()
			c = restartCP(t, cfg, c.SouthboundAddr())
			segs, err := c.Store().ListSegments(ctx)
			if err != nil || len(segs) != 1 || segs[0].Name != "main" || len(segs[0].Links) != 1 {
				t.Fatalf("segments after restart: %+v, %v", segs, err)
			}
			if err := Eventually(ctx, func() error {
				if err := Converged(ctx, c.Store(), f, orphans); err != nil {
					return err
				}
				if links, _ := c.Store().ListLinks(ctx, store.LinkFilter{}); len(links) != len(old) {
					return store.NotFound("rebuilt links", "")
				}
				return nil
			}); err != nil {
				t.Fatalf("not rebuilt: %v", err)
			}
			for _, l := range old {
				if _, err := c.Store().GetLink(ctx, l.ID); err == nil {
					t.Fatalf("link %s survived the restart", l.ID)
				}
			}
			stale := staleConnections(t, f, c.Store())
			switch {
			case orphans && len(stale) > 0:
				t.Fatalf("orphan detection on, stale connections left: %v", stale)
			case !orphans && !slices.Contains(stale, "edge-b/n2:foreign-link"):
				t.Fatalf("orphan detection off deleted an untracked connection: left %v", stale)
			}
		})
	}
}

// TestRestartProcessKeepsOneConnectionPerLink restarts a control plane that runs as a
// process of its own — API mode, SQLite, the topology made through the northbound API
// — under running data-plane nodes, with orphan detection off. The restarted control
// plane rebuilds the links under new ids, perhaps through other gateways. Afterwards
// every node's datapath must hold exactly one connection per link and one
// subscription per route: nothing left over from before the restart (a connection
// between two nodes the control plane manages is its own, whatever orphan detection
// says; a subscription it does not track goes), while a connection it did not make
// stays. And a node that dials the same endpoint as before keeps its connection: it is
// handed over to the new link, not closed and dialled again.
func TestRestartProcessKeepsOneConnectionPerLink(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 90*time.Second)
	db := filepath.Join(t.TempDir(), "cp.db")
	p := startCPProcess(t, "127.0.0.1:0", db)
	nb := p.northbound(t)
	if _, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "main", GroupA: "cloud", GroupB: "*"}); err != nil {
		t.Fatal(err)
	}
	// cloud/n1 is the only cloud node with an external endpoint, and edge-a/n1 the
	// only node of its group: their link is the same after the restart, whatever the
	// random picks. The other groups leave the control plane choices to make.
	f := newFabric(t)
	for _, n := range []NodeConfig{
		{Group: "cloud", ID: "n1"}, {Group: "cloud", ID: "n2", NoExternal: true},
		{Group: "edge-a", ID: "n1", NoExternal: true},
		{Group: "edge-b", ID: "n1", NoExternal: true}, {Group: "edge-b", ID: "n2", NoExternal: true},
		{Group: "edge-c", ID: "n1"}, {Group: "edge-c", ID: "n2"},
	} {
		n.Target = p.south
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
	const foreign = "foreign-link"
	before := convergeProcess(t, ctx, nb, f, nil, foreign)
	// A connection some other controller made, to an endpoint no node has.
	if _, err := f.Node("edge-b/n2").Datapath().Connect(ctx, foreign, "10.9.9.9:443", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	dialsBefore, outBefore := dials(f), outgoing(f)
	if !outBefore["edge-a/n1"][f.Node("cloud/n1").External()] {
		t.Fatalf("edge-a/n1 does not dial cloud/n1: %v", outBefore)
	}

	p.stop()
	p = startCPProcess(t, p.south, db)
	nb = p.northbound(t)
	segs, err := nb.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
	if err != nil || len(segs.GetSegments()) != 1 || segs.GetSegments()[0].GetName() != "main" {
		t.Fatalf("segments after the restart: %v, %v", segs, err)
	}
	after := convergeProcess(t, ctx, nb, f, before, foreign)

	for id := range before {
		if after[id] {
			t.Errorf("link %s survived the restart", id)
		}
	}
	if !slices.ContainsFunc(f.Node("edge-b/n2").Datapath().Connections(), func(c dataplane.ConnInfo) bool { return c.LinkID == foreign }) {
		t.Error("a connection the control plane did not make was deleted (orphan detection is off)")
	}
	dialsAfter, outAfter := dials(f), outgoing(f)
	kept := 0
	for node, eps := range outAfter {
		for ep := range eps {
			if !outBefore[node][ep] {
				continue
			}
			kept++
			if dialsAfter[node][ep] != dialsBefore[node][ep] {
				if os.Getenv("E2E_LOG") != "" {
					t.Logf("ops of %s: %q\nlog:\n%s", node, f.Node(node).Datapath().Ops(), p.stderr())
				}
				t.Errorf("%s dialled %s, which it was connected to before the restart, again: %d dials before, %d after",
					node, ep, dialsBefore[node][ep], dialsAfter[node][ep])
			}
		}
	}
	if kept == 0 {
		t.Fatalf("no node dials the same endpoint after the restart: before %v, after %v", outBefore, outAfter)
	}
}

// convergeProcess waits until the control plane behind nb and the datapaths agree,
// stably, with exactly one connection per link and one subscription per route, no
// link of old left, and the three links of the test's star in place. It returns the
// ids of the links.
func convergeProcess(t *testing.T, ctx context.Context, nb controlplanev1.ControlPlaneServiceClient, f *Fabric, old map[string]bool, foreign string) map[string]bool {
	t.Helper()
	if err := f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		last  string
		since time.Time
		ids   map[string]bool
	)
	err := Eventually(ctx, func() error {
		links, routes, err := desired(ctx, nb)
		if err != nil {
			return err
		}
		ids = map[string]bool{}
		var fp strings.Builder
		for _, l := range links {
			ids[l.ID] = true
			fmt.Fprintf(&fp, "%s %s %s;", l.ID, l.Status, l.DestNodeID)
		}
		nroutes := 0
		for _, r := range routes {
			if !r.IsTemplate() {
				nroutes++
				fmt.Fprintf(&fp, "%d %s;", r.ID, r.Status)
			}
		}
		switch {
		case len(links) != 3:
			return fmt.Errorf("%d links, want 3", len(links))
		case nroutes == 0:
			return errors.New("no route expanded yet")
		}
		for id := range ids {
			if old[id] {
				return fmt.Errorf("link %s from before the restart is still there", id)
			}
		}
		if err := ConvergedTo(links, routes, f, false); err != nil {
			return err
		}
		if err := exactlyOnce(f, links, routes, foreign); err != nil {
			return err
		}
		if fp.String() != last {
			last, since = fp.String(), time.Now()
		}
		if time.Since(since) < 300*time.Millisecond {
			return errors.New("not stable yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("not converged: %v", err)
	}
	return ids
}

// exactlyOnce checks every datapath against the links and routes: each link has one
// connection at its source and one at its destination and no other labelled
// connection exists (but allowed); each route has one subscription, and no
// subscription exists that no route wants.
func exactlyOnce(f *Fabric, links []store.Link, routes []store.Route, allowed string) error {
	byID := map[string]store.Link{}
	for _, l := range links {
		byID[l.ID] = l
	}
	type sub struct {
		node string
		name dataplane.Name
		link string
	}
	wanted := map[sub]bool{}
	for _, r := range routes {
		if !r.IsTemplate() && !r.Deleted {
			wanted[sub{r.SourceNodeID, DataplaneName(r.Name), r.LinkID}] = true
		}
	}
	var errs []error
	conns := map[string]int{} // "node in|out link" -> connections
	have := map[sub]int{}
	for _, n := range f.Nodes() {
		dp := n.Datapath()
		label := map[dataplane.ConnID]string{}
		for _, c := range dp.Connections() {
			label[c.ID] = c.LinkID
			if c.LinkID == "" || c.LinkID == allowed {
				continue
			}
			l, ok := byID[c.LinkID]
			switch {
			case !ok || l.Deleted:
				errs = append(errs, fmt.Errorf("%s holds a connection for link %s, which the control plane does not have", n.ID(), c.LinkID))
			case c.Inbound && l.DestNodeID != n.ID(), !c.Inbound && l.SourceNodeID != n.ID():
				errs = append(errs, fmt.Errorf("%s holds a connection for link %s %s -> %s", n.ID(), l.ID, l.SourceNodeID, l.DestNodeID))
			}
			conns[fmt.Sprintf("%s %v %s", n.ID(), c.Inbound, c.LinkID)]++
		}
		for _, s := range dp.Subscriptions() {
			k := sub{n.ID(), s.Name, label[s.Conn]}
			have[k]++
			if !wanted[k] {
				errs = append(errs, fmt.Errorf("%s holds subscription %s over %q, which no route wants", n.ID(), s.Name, k.link))
			}
		}
	}
	for _, l := range links {
		if l.Deleted {
			continue
		}
		for _, end := range []string{fmt.Sprintf("%s false %s", l.SourceNodeID, l.ID), fmt.Sprintf("%s true %s", l.DestNodeID, l.ID)} {
			if n := conns[end]; n != 1 {
				errs = append(errs, fmt.Errorf("link %s: %d connections at %q, want 1", l.ID, n, end))
			}
		}
	}
	for k := range wanted {
		if n := have[k]; n != 1 {
			errs = append(errs, fmt.Errorf("route %s on %s over %s: %d subscriptions, want 1", k.name, k.node, k.link, n))
		}
	}
	return errors.Join(errs...)
}

// dials counts, per node and endpoint, the connects its datapath made.
func dials(f *Fabric) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, n := range f.Nodes() {
		out[n.ID()] = map[string]int{}
		for _, op := range n.Datapath().Ops() {
			if w := strings.Fields(op); len(w) == 3 && w[0] == "connect" {
				out[n.ID()][w[2]]++
			}
		}
	}
	return out
}

// outgoing lists, per node, the endpoints its labelled connections dial.
func outgoing(f *Fabric) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, n := range f.Nodes() {
		out[n.ID()] = map[string]bool{}
		for _, c := range n.Datapath().Connections() {
			if !c.Inbound && c.LinkID != "" {
				out[n.ID()][c.Endpoint] = true
			}
		}
	}
	return out
}
