package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

func etcdConfig(t *testing.T, c *embedetcd.Cluster) string {
	t.Helper()
	return "database:\n  type: etcd\n  etcd:\n    endpoints: [" + strings.Join(c.Endpoints(), ", ") +
		"]\n    prefix: /" + strings.ReplaceAll(t.Name(), "/", "-") + "/\n    lease_ttl: 2s\n" +
		"registration_auth:\n  type: shared_secret\n  secrets: {cloud: cloud-secret-0123456789abcdef0123456789}\n"
}

func leaderGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "switchboard_controlplane_leader" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no switchboard_controlplane_leader series")
	return -1
}

// TestHAStandbyAndResign: of two replicas on etcd one leads (gauge 1, the other 0);
// the standby serves reads and refuses writes naming the leader; when the leader
// stops gracefully it resigns and the standby leads at once, writes accepted.
func TestHAStandbyAndResign(t *testing.T) {
	ctx := deadline(t)
	c := embedetcd.New(t, embedetcd.Options{})
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, stopA := run(t, server.Options{Config: testConfig(t, etcdConfig(t, c)), Metrics: regA})
	if err := cpharness.Eventually(ctx, func() error {
		if !a.IsLeader() {
			return context.DeadlineExceeded
		}
		return nil
	}); err != nil {
		t.Fatal("the first replica never leads")
	}
	b, _ := run(t, server.Options{Config: testConfig(t, etcdConfig(t, c)), Metrics: regB})
	if leaderGauge(t, regA) != 1 || leaderGauge(t, regB) != 0 || b.IsLeader() {
		t.Fatalf("leader gauges a=%v b=%v (b leads %v), want 1 and 0", leaderGauge(t, regA), leaderGauge(t, regB), b.IsLeader())
	}
	nbA, nbB := nbClient(t, a.NorthboundAddr()), nbClient(t, b.NorthboundAddr())
	if _, err := nbA.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := cpharness.Eventually(ctx, func() error {
		segs, err := nbB.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
		if err == nil && len(segs.GetSegments()) != 1 {
			return context.DeadlineExceeded
		}
		return err
	}); err != nil {
		t.Fatalf("the standby never reads the leader's segment: %v", err)
	}
	_, err := nbB.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "s2"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), a.NorthboundAddr()) {
		t.Fatalf("standby write: %v, want FailedPrecondition naming %s", err, a.NorthboundAddr())
	}

	// A secret added after the standby started: it learns it when it takes over.
	const secret = "0123456789abcdef0123456789abcdef"
	if _, err := nbA.AddGroupSecret(ctx, &controlplanev1.GroupSecretRequest{Group: "edge", Secret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := stopA(); err != nil {
		t.Fatalf("leader stop: %v", err)
	}
	if err := cpharness.Eventually(ctx, func() error {
		_, err := nbB.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "s2"})
		return err
	}); err != nil {
		t.Fatalf("the standby never took over: %v", err)
	}
	if leaderGauge(t, regB) != 1 {
		t.Fatal("the new leader's gauge is not 1")
	}
	groups, err := nbB.ListGroups(ctx, &controlplanev1.ListGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{}
	for _, g := range groups.GetGroups() {
		sources[g.GetName()] = g.GetSecretSource()
	}
	if sources["edge"] != "api" || sources["cloud"] != "config" {
		t.Fatalf("secret sources on the new leader: %v, want edge from the API, cloud from the file", sources)
	}
}

func nbClient(t *testing.T, addr string) controlplanev1.ControlPlaneServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlplanev1.NewControlPlaneServiceClient(conn)
}
