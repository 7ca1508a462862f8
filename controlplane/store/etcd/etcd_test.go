package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/controlplane/store/storetest"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

var prefixes atomic.Int64

func newCluster(t *testing.T) *embedetcd.Cluster {
	return embedetcd.New(t, embedetcd.Options{Configure: func(c *embed.Config) { c.MaxTxnOps = 10000 }})
}

func open(t *testing.T, c *embedetcd.Cluster, o cpetcd.Options) *cpetcd.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.Endpoints = c.Endpoints()
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("/test/%d/", prefixes.Add(1))
	}
	s, err := cpetcd.Open(ctx, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// TestConformance: the etcd store passes the suite the memory and SQLite stores pass.
func TestConformance(t *testing.T) {
	c := newCluster(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, c, cpetcd.Options{}) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestReopen: what one store wrote, a store opened later on the same prefix reads —
// versions and route ids included, and a new route gets a new id.
func TestReopen(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	a := open(t, c, cpetcd.Options{Prefix: "/reopen"})
	must(t, a.CreateLink(ctx, store.Link{ID: "l1", SourceNodeID: "a/1", SourceGroup: "a", DestGroup: "b", Status: store.LinkPending}))
	_, err := store.SetLinkStatus(ctx, a, "l1", store.LinkConnecting, "")
	must(t, err)
	name := store.NewName("o", "n", "s")
	r1, err := a.CreateRoute(ctx, store.Route{SourceNodeID: "a/1", LinkID: "l1", Name: name, Status: store.RoutePending})
	must(t, err)
	r2, err := a.CreateRoute(ctx, store.Route{SourceNodeID: "a/2", LinkID: "l1", Name: name, Status: store.RoutePending})
	must(t, err)
	must(t, a.DeleteRoute(ctx, r2.ID))
	must(t, a.CreateSegment(ctx, "seg"))
	must(t, a.AddSegmentLink(ctx, store.NewSegmentLink("seg", "b", "a")))
	must(t, a.SetGroupSecret(ctx, "a", "s3cret"))
	must(t, a.Close())

	b := open(t, c, cpetcd.Options{Prefix: "/reopen"})
	defer b.Close()
	l, err := b.GetLink(ctx, "l1")
	must(t, err)
	if l.Version != 2 || l.Status != store.LinkConnecting {
		t.Fatalf("reopened link = %+v, want version 2, connecting", l)
	}
	r, err := b.GetRoute(ctx, r1.ID)
	must(t, err)
	if r != r1 {
		t.Fatalf("reopened route = %+v, want %+v", r, r1)
	}
	r3, err := b.CreateRoute(ctx, store.Route{SourceNodeID: "a/3", LinkID: "l1", Name: name, Status: store.RoutePending})
	must(t, err)
	if r3.ID <= r2.ID {
		t.Fatalf("new route id %d reuses a deleted one (%d)", r3.ID, r2.ID)
	}
	segs, err := b.ListSegments(ctx)
	must(t, err)
	if len(segs) != 1 || len(segs[0].Links) != 1 || segs[0].Links[0] != store.NewSegmentLink("seg", "a", "b") {
		t.Fatalf("reopened segments = %+v", segs)
	}
	secrets, err := b.ListGroupSecrets(ctx)
	must(t, err)
	if secrets["a"] != "s3cret" {
		t.Fatalf("reopened secrets = %v", secrets)
	}
}

// TestConflictWithAnotherWriter: a record changed in etcd behind the cache's back
// makes the write fail with ErrConflict, not overwrite it; the write after re-reads.
func TestConflictWithAnotherWriter(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	a := open(t, c, cpetcd.Options{Prefix: "/conflict"})
	defer a.Close()
	b := open(t, c, cpetcd.Options{Prefix: "/conflict"})
	defer b.Close()
	must(t, a.CreateLink(ctx, store.Link{ID: "l1", SourceNodeID: "a/1", Status: store.LinkPending}))
	must(t, b.Close()) // b's cache predates the link; reopen so it has it
	b = open(t, c, cpetcd.Options{Prefix: "/conflict"})
	_, err := store.SetLinkStatus(ctx, b, "l1", store.LinkConnecting, "by b")
	must(t, err)
	_, err = store.SetLinkStatus(ctx, a, "l1", store.LinkConnecting, "by a")
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("write over another writer's change: err = %v, want ErrConflict", err)
	}
	l, err := a.GetLink(ctx, "l1")
	must(t, err)
	if l.StatusMessage != "by b" || l.Version != 2 {
		t.Fatalf("after the conflict a reads %+v, want b's write at version 2", l)
	}
}

// TestFencing: with RequireLeader, writes are refused until Lead; after the election
// key is deleted (the lease expired) or taken by another, every write fails with
// ErrNotLeader and nothing reaches etcd.
func TestFencing(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	s := open(t, c, cpetcd.Options{Prefix: "/fence", RequireLeader: true})
	defer s.Close()
	if err := s.SaveNode(ctx, store.Node{ID: "a/1", Group: "a"}); !errors.Is(err, cpetcd.ErrNotLeader) {
		t.Fatalf("standby write: err = %v, want ErrNotLeader", err)
	}
	cli := s.Client()
	put, err := cli.Put(ctx, "/election/leader-1", "me")
	must(t, err)
	must(t, s.Lead(ctx, "/election/leader-1", put.Header.Revision))
	must(t, s.SaveNode(ctx, store.Node{ID: "a/1", Group: "a"}))
	_, err = cli.Delete(ctx, "/election/leader-1")
	must(t, err)
	err = s.SaveNode(ctx, store.Node{ID: "a/2", Group: "a"})
	if !errors.Is(err, cpetcd.ErrNotLeader) {
		t.Fatalf("deposed leader's write: err = %v, want ErrNotLeader", err)
	}
	err = s.Atomically(ctx, func(ctx context.Context) error {
		return s.SetNodeConnected(ctx, "a/1", true)
	})
	if !errors.Is(err, cpetcd.ErrNotLeader) {
		t.Fatalf("deposed leader's transaction: err = %v, want ErrNotLeader", err)
	}
	got, err := cli.Get(ctx, "/fence/nodes/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	must(t, err)
	if len(got.Kvs) != 1 || string(got.Kvs[0].Key) != "/fence/nodes/a/1" {
		t.Fatalf("etcd holds %v, want the leader's one node only", got.Kvs)
	}
}

// TestStandbyFollows: a standby's reads see what the leader writes.
func TestStandbyFollows(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	leader := open(t, c, cpetcd.Options{Prefix: "/follow"})
	defer leader.Close()
	standby := open(t, c, cpetcd.Options{Prefix: "/follow", RequireLeader: true})
	defer standby.Close()
	must(t, leader.CreateSegment(ctx, "seg"))
	for {
		segs, err := standby.ListSegments(ctx)
		must(t, err)
		if len(segs) == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the standby never saw the leader's segment")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestBadOptions: what is wrong is named.
func TestBadOptions(t *testing.T) {
	ctx := ctxT(t)
	for _, c := range []struct {
		o    cpetcd.Options
		want string
	}{
		{cpetcd.Options{}, "no endpoints"},
		{cpetcd.Options{Endpoints: []string{"127.0.0.1:1"}, Prefix: "/"}, "prefix"},
		{cpetcd.Options{Endpoints: []string{"127.0.0.1:1"}, Username: "u"}, "username and password"},
	} {
		_, err := cpetcd.Open(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v) = %v, want an error about %q", c.o, err, c.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
