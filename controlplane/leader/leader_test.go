package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchboard-mesh/switchboard/controlplane/leader"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

func client(t *testing.T, c *embedetcd.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

type replica struct {
	e       *leader.Elector
	leading chan leader.Term
	stopped chan struct{} // closed when lead returned
	done    chan error    // Run's result
	cancel  context.CancelFunc
}

func start(t *testing.T, cli *clientv3.Client, id string) *replica {
	t.Helper()
	e, err := leader.New(leader.Options{Client: cli, Prefix: "/el", TTL: 2 * time.Second,
		Self: leader.Info{ID: id, Southbound: id + ":52"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{e: e, leading: make(chan leader.Term, 1), stopped: make(chan struct{}), done: make(chan error, 1), cancel: cancel}
	go func() {
		r.done <- e.Run(ctx, func(ctx context.Context, term leader.Term) {
			r.leading <- term
			<-ctx.Done()
			close(r.stopped)
		})
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func waitFor[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResignHandsOver: the first replica leads, both observe it; when it stops it
// resigns and the second leads, with the first's lead context ended first.
func TestResignHandsOver(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{})
	cli := client(t, c)
	a := start(t, cli, "a")
	waitFor(t, "a to lead", a.leading)
	b := start(t, cli, "b")
	eventually(t, "b to observe a", func() bool { l, ok := b.e.Leader(); return ok && l.ID == "a" && l.Southbound == "a:52" })
	if !a.e.IsLeader() || b.e.IsLeader() {
		t.Fatalf("IsLeader: a %v, b %v; want a only", a.e.IsLeader(), b.e.IsLeader())
	}
	a.cancel()
	if err := waitFor(t, "a to return", a.done); err != nil {
		t.Fatalf("a.Run after its context ended = %v, want nil", err)
	}
	a.done <- nil // for the cleanup
	waitFor(t, "b to lead", b.leading)
	select {
	case <-a.stopped:
	default:
		t.Fatal("b leads while a's lead had not returned")
	}
	eventually(t, "a's observation to move on", func() bool { l, ok := b.e.Leader(); return ok && l.ID == "b" })
}

// TestLeaseLossEndsLead: when the leader's lease is revoked behind its back (as
// etcd does when it expires), its lead ends and Run returns ErrLost; the other
// replica then leads.
func TestLeaseLossEndsLead(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{})
	cli := client(t, c)
	a := start(t, cli, "a")
	term := waitFor(t, "a to lead", a.leading)
	b := start(t, cli, "b")
	resp, err := cli.Get(context.Background(), term.Key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v %v", resp, err)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, "a to give up", a.done); !errors.Is(err, leader.ErrLost) {
		t.Fatalf("a.Run after its lease went = %v, want ErrLost", err)
	}
	a.done <- nil
	waitFor(t, "a's lead to return", a.stopped)
	waitFor(t, "b to lead", b.leading)
}

func TestBadOptions(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{})
	cli := client(t, c)
	for _, o := range []leader.Options{
		{Prefix: "/el", TTL: 2 * time.Second, Self: leader.Info{ID: "a"}},
		{Client: cli, Prefix: "/", TTL: 2 * time.Second, Self: leader.Info{ID: "a"}},
		{Client: cli, Prefix: "/el", TTL: time.Second, Self: leader.Info{ID: "a"}},
		{Client: cli, Prefix: "/el", TTL: 2500 * time.Millisecond, Self: leader.Info{ID: "a"}},
		{Client: cli, Prefix: "/el", TTL: 2 * time.Second},
	} {
		if _, err := leader.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestObserverRecoversFromALostEvent: an observer whose watch lost the event that
// changed the leader finds the new one by itself, without waiting for another change.
func TestObserverRecoversFromALostEvent(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{})
	cli := client(t, c)
	a := start(t, cli, "a")
	waitFor(t, "a to lead", a.leading)
	b := start(t, cli, "b")
	eventually(t, "b to observe a", func() bool { l, ok := b.e.Leader(); return ok && l.ID == "a" })
	leader.DropWatchEvents(b.e, 1)
	a.cancel()
	if err := waitFor(t, "a to return", a.done); err != nil {
		t.Fatalf("a.Run after its context ended = %v, want nil", err)
	}
	a.done <- nil
	waitFor(t, "b to lead", b.leading)
	eventually(t, "b's observation to move on", func() bool { l, ok := b.e.Leader(); return ok && l.ID == "b" })
}
