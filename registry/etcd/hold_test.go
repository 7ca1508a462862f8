package etcd

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
)

// An outage of the backend longer than a hold's TTL, after which the backend still
// has the hold's lease (etcd extends every lease when a member becomes leader: a
// restart does), leaves the entries under the hold where they are. The etcd client
// gives up its keepalive of a lease it heard nothing of for the lease's TTL; the
// hold must then go on renewing the lease that still exists, not leave it (and its
// entries) to expire behind a new one.
func TestHoldKeepsItsLeaseThroughABackendRestart(t *testing.T) {
	// The restart extends the lease by its TTL; the client must reconnect within it
	// (its reconnection backs off up to a few seconds), which 3 s did not always leave.
	const ttl = 6 * time.Second
	ctx := testCtx(t)
	c, err := embedetcd.Start(ctx, embedetcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := New(ctx, Options{Endpoints: c.Endpoints(), Prefix: uniquePrefix(t), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hctx, stopHolding := context.WithCancel(ctx)
	defer stopHolding()
	hid, err := r.Hold(hctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	e := ep("east", "web", "http", "10.0.0.1", 80)
	e.TTL = endpoint.TTL(time.Second)
	op := registry.Register(e)
	op.Hold = hid
	if err := r.Apply(ctx, []registry.Op{op}); err != nil {
		t.Fatal(err)
	}

	c.Member(0).Stop()
	time.Sleep(ttl + 2*time.Second) // past the client's keepalive deadline
	if err := c.Member(0).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// The lease, extended at the restart, would run out within ttl and a second of
	// etcd's expiry check; three TTLs leave no doubt.
	for time.Since(back) < 3*ttl {
		time.Sleep(200 * time.Millisecond)
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := r.List(lctx, endpoint.Filter{})
		cancel()
		if err != nil {
			continue // the client reconnecting
		}
		if !slices.ContainsFunc(got, func(g endpoint.Endpoint) bool { return g.Key() == e.Key() }) {
			t.Fatalf("the held entry went %s after the backend's restart, its hold still held", time.Since(back).Round(100*time.Millisecond))
		}
	}
}

// A hold whose lease the server dropped is renewed under the same ID with a new
// lease: what the old one held is gone, and a registration under the hold lives on
// the new one.
func TestHoldRenewsALeaseTheServerDropped(t *testing.T) {
	const ttl = 3 * time.Second
	r := open(t)
	ctx := testCtx(t)
	hctx, stopHolding := context.WithCancel(ctx)
	defer stopHolding()
	hid, err := r.Front.Hold(hctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.heldLease(hid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.client.Revoke(ctx, first); err != nil {
		t.Fatal(err)
	}
	var now clientv3.LeaseID
	for end := time.Now().Add(3 * ttl); now == 0 || now == first; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the hold still names the revoked lease %x after %s", first, 3*ttl)
		}
		now, _ = r.heldLease(hid)
	}
	e := ep("east", "web", "http", "10.0.0.2", 80)
	e.TTL = endpoint.TTL(time.Second)
	op := registry.Register(e)
	op.Hold = hid
	mustApply(t, r, op)
	if got := leaseOf(t, r, e); got != now {
		t.Fatalf("registered under lease %x, want the hold's new lease %x", got, now)
	}
}
