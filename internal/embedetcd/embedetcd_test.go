package embedetcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSingleMemberKeepsDataAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := embedetcd.New(t, embedetcd.Options{})
	eps := c.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v, want one http://127.0.0.1 URL", eps)
	}
	cli := client(t, eps...)
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	m := c.Member(0)
	m.Stop()
	if m.Running() {
		t.Fatal("Running() after Stop")
	}
	m.Stop() // idempotent
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx); err == nil {
		t.Fatal("Restart of a running member succeeded")
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("after restart Get(k) = %v, want v1", resp.Kvs)
	}
}

func TestClusterSurvivesOneMemberDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := embedetcd.New(t, embedetcd.Options{Members: 3})
	if n := len(c.Members()); n != 3 {
		t.Fatalf("%d members, want 3", n)
	}
	cli := client(t, c.Endpoints()...)
	for i, m := range c.Members() {
		m.Stop()
		// A write needs a quorum of the two survivors; retry through the election
		// that follows stopping the leader.
		var err error
		for attempt := 0; attempt < 50; attempt++ {
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = cli.Put(wctx, "k", m.Name())
			wcancel()
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("write with member %d down: %v", i, err)
		}
		if err := m.Restart(ctx); err != nil {
			t.Fatalf("restart member %d: %v", i, err)
		}
		// The restarted member has caught up: a read served by it alone sees the write.
		single := client(t, m.Endpoint())
		resp, err := single.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != m.Name() {
			t.Fatalf("member %s after restart reads %v, want %s", m.Name(), resp.Kvs, m.Name())
		}
	}
}
