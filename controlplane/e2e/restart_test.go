package e2e

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
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
// orphans: all deleted with orphan detection on; with it off only those in the way of
// a new link to the same endpoint go, and others stay.
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
