package memdp

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSubscribeLifecycle(t *testing.T) {
	ctx := context.Background()
	d := New()
	defer d.Close()
	c, err := d.Connect(ctx, "L1", "10.0.0.1:1", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Config(c)) != `{"a":1}` {
		t.Fatalf("config %s", d.Config(c))
	}
	var acks []error
	n := dataplane.NewName("a", "b", "c")
	id1, err := d.Subscribe(ctx, c, n, func(err error) { acks = append(acks, err) })
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := d.Subscribe(ctx, c, n, func(err error) { acks = append(acks, err) })
	if id1 != id2 || len(acks) != 2 || acks[0] != nil || len(d.Subscriptions()) != 1 {
		t.Fatalf("idempotent subscribe: ids %d %d, acks %v", id1, id2, acks)
	}
	if _, err := d.Subscribe(ctx, 99, n, func(error) {}); !errors.Is(err, dataplane.ErrConnNotFound) {
		t.Fatalf("subscribe on unknown conn: %v", err)
	}
	if err := d.Unsubscribe(ctx, c, 42); !errors.Is(err, dataplane.ErrSubNotFound) {
		t.Fatalf("unknown sub: %v", err)
	}
	if err := d.Unsubscribe(ctx, c, id1); err != nil {
		t.Fatal(err)
	}
	if err := d.Disconnect(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := d.Disconnect(ctx, c); !errors.Is(err, dataplane.ErrConnNotFound) {
		t.Fatalf("double disconnect: %v", err)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	d := New()
	defer d.Close()
	boom := errors.New("boom")
	d.FailConnect("bad:1", boom)
	if _, err := d.Connect(ctx, "L", "bad:1", nil); !errors.Is(err, boom) {
		t.Fatalf("fail connect: %v", err)
	}
	c, err := d.Connect(ctx, "L", "good:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.FailConnect("", boom)
	if _, err := d.Connect(ctx, "L2", "good:2", nil); !errors.Is(err, boom) {
		t.Fatalf("fail any connect: %v", err)
	}
	d.FailConnect("", nil)

	d.RejectAcks(boom)
	got := make(chan error, 1)
	d.Subscribe(ctx, c, dataplane.NewName("a", "b", "c"), func(err error) { got <- err })
	if err := <-got; !errors.Is(err, boom) || len(d.Subscriptions()) != 0 {
		t.Fatalf("rejected ack: %v, subs %v", err, d.Subscriptions())
	}
	d.RejectAcks(nil)

	d.DelayAcks(time.Millisecond)
	d.Subscribe(ctx, c, dataplane.NewName("a", "b", "d"), func(err error) { got <- err })
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delayed ack never came")
	}

	// Drop loses the connection and its subscriptions.
	if !d.Drop(c) || len(d.Connections()) != 0 || len(d.Subscriptions()) != 0 {
		t.Fatalf("drop left %v %v", d.Connections(), d.Subscriptions())
	}
}

func TestCloseCancelsDelayedAcks(t *testing.T) {
	d := New()
	c, _ := d.Connect(context.Background(), "L", "x:1", nil)
	d.DelayAcks(time.Hour)
	called := make(chan struct{}, 1)
	d.Subscribe(context.Background(), c, dataplane.NewName("a", "b", "c"), func(error) { called <- struct{}{} })
	d.Close()
	select {
	case <-called:
		t.Fatal("ack delivered after Close")
	default:
	}
}

func TestDisableLog(t *testing.T) {
	ctx := context.Background()
	d := New()
	defer d.Close()
	c, err := d.Connect(ctx, "L1", "10.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.DisableLog()
	if _, err := d.Subscribe(ctx, c, dataplane.NewName("a", "b", "c"), func(error) {}); err != nil {
		t.Fatal(err)
	}
	if ops := d.Ops(); len(ops) != 1 || ops[0] != "connect L1 10.0.0.1:1" {
		t.Fatalf("ops after DisableLog %q, want only the connect logged before it", ops)
	}
	if len(d.Subscriptions()) != 1 {
		t.Fatal("the subscribe was not done")
	}
}
