package etcd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func registers(n int) []registry.Op {
	ops := make([]registry.Op, n)
	for i := range ops {
		ops[i] = registry.Register(ep("prod", "web", "http", fmt.Sprintf("10.1.%d.%d", i/250, i%250), 80))
	}
	return ops
}

// Every key a Txn writes gets that Txn's revision, so the distinct revisions of a
// batch's keys count the transactions it took. (The store's revision would also
// count other tests' lease expiries.)
func TestApplyIsOneTxnPerChunk(t *testing.T) {
	for _, c := range []struct {
		name            string
		configured, ops int
		wantTxns        int
		wantMaxOps      int64
	}{
		{"fits", 0, 100, 1, 128},
		{"exactly max", 0, 128, 1, 128},
		{"split at max", 0, 300, 3, 128},
		{"configured smaller", 50, 120, 3, 50},
		// The server allows 128: chunks of 300 and 150 are refused, 75 fit.
		{"server limit lower", 500, 300, 4, 75},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := open(t, func(o *Options) { o.MaxTxnOps = c.configured })
			mustApply(t, r, registers(c.ops)...)
			if got := txnCount(t, r); got != c.wantTxns {
				t.Errorf("%d ops took %d transactions, want %d", c.ops, got, c.wantTxns)
			}
			if got := r.maxOps.Load(); got != c.wantMaxOps {
				t.Errorf("chunk size now %d, want %d", got, c.wantMaxOps)
			}
			got, err := r.List(testCtx(t), endpoint.Filter{})
			if err != nil || len(got) != c.ops {
				t.Fatalf("List = %d endpoints, %v; want %d", len(got), err, c.ops)
			}
		})
	}
}

// A batch that fits one Txn is seen by a watcher as one revision: all of it or
// none of it, with the coalesced result.
func TestApplyBatchIsAtomicAndCoalesced(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	a2 := a
	a2.Priority = 9
	mustApply(t, r, registry.Register(a), registry.Register(b), registry.Unregister(b), registry.Register(a2))
	resp, err := r.client.Get(ctx, r.Prefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Fatalf("after the batch etcd holds %v; want only a, written once", resp.Kvs)
	}
	got, _ := r.List(ctx, endpoint.Filter{})
	if len(got) != 1 || !endpoint.Equal(got[0], a2) {
		t.Fatalf("List = %+v, want [%+v]", got, a2)
	}
}

// txnCount returns how many distinct revisions wrote the registry's keys.
func txnCount(t *testing.T, r reg) int {
	t.Helper()
	resp, err := r.client.Get(testCtx(t), r.Prefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	revs := map[int64]bool{}
	for _, kv := range resp.Kvs {
		revs[kv.ModRevision] = true
	}
	return len(revs)
}

func leaseOf(t *testing.T, r reg, e endpoint.Endpoint) clientv3.LeaseID {
	t.Helper()
	resp, err := r.client.Get(testCtx(t), r.layout.key(e.Key()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%s is not stored", e.Key())
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func withTTL(e endpoint.Endpoint, d time.Duration) endpoint.Endpoint {
	e.TTL = endpoint.TTL(d)
	return e
}

// TestLeaseBuckets checks the lease design of doc.go: one lease per TTL value and
// bucket, granted for TTL+bucket; a refresh in a later bucket moves the key to a
// fresh lease, so the old lease's expiry removes only keys nobody refreshed.
func TestLeaseBuckets(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	clock := time.Now()
	r.leases.now = func() time.Time { return clock }
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())

	a := withTTL(ep("prod", "web", "http", "10.0.0.1", 80), 20*time.Second)
	b := withTTL(ep("prod", "web", "http", "10.0.0.2", 80), 20*time.Second)
	c := withTTL(ep("prod", "web", "http", "10.0.0.3", 80), 30*time.Second)
	mustApply(t, r, registry.Register(a))
	mustApply(t, r, registry.Register(b), registry.Register(c))
	expectEvents(t, ch, added(a), added(b), added(c))
	first := leaseOf(t, r, a)
	if first == clientv3.NoLease || leaseOf(t, r, b) != first {
		t.Fatalf("a and b (same TTL, same bucket) have leases %x and %x, want one shared lease", first, leaseOf(t, r, b))
	}
	if leaseOf(t, r, c) == first {
		t.Fatal("c (another TTL) shares a's lease")
	}
	ttl, err := r.client.TimeToLive(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(20 + 2); ttl.GrantedTTL != want {
		t.Fatalf("lease for TTL 20s granted for %ds, want %ds (TTL + 2s bucket)", ttl.GrantedTTL, want)
	}

	clock = clock.Add(bucketWidth(20 * time.Second)) // the next bucket
	mustApply(t, r, registry.Register(a))            // a refresh: same fields, no event
	second := leaseOf(t, r, a)
	if second == first || second == clientv3.NoLease {
		t.Fatalf("a refreshed in a later bucket kept lease %x", second)
	}
	ttl, err = r.client.TimeToLive(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL < 20 {
		t.Fatalf("refreshed a has %ds left, want at least its TTL of 20s", ttl.TTL)
	}

	// The first lease ending (revoked here rather than waited for) takes b, which
	// was not refreshed, and leaves a.
	if _, err := r.client.Revoke(ctx, first); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, removed(b))
	expectQuiet(t, ch)
	got, _ := r.List(ctx, endpoint.Filter{})
	if len(got) != 2 || got[0].Key() != a.Key() || got[1].Key() != c.Key() {
		t.Fatalf("after the first lease ended List = %v, want a and c", got)
	}
}

// Never and unset TTLs write without a lease, and re-registering without a TTL
// detaches a key from its lease.
func TestNoLeaseWithoutTTL(t *testing.T) {
	r := open(t)
	never := ep("prod", "web", "http", "10.0.0.1", 80)
	never.TTL = endpoint.Never
	unset := ep("prod", "web", "http", "10.0.0.2", 80)
	short := withTTL(ep("prod", "web", "http", "10.0.0.3", 80), 30*time.Second)
	mustApply(t, r, registry.Register(never), registry.Register(unset), registry.Register(short))
	for _, e := range []endpoint.Endpoint{never, unset} {
		if id := leaseOf(t, r, e); id != clientv3.NoLease {
			t.Errorf("%s (ttl %q) has lease %x, want none", e.Key(), e.TTL, id)
		}
	}
	id := leaseOf(t, r, short)
	short.TTL = 0
	mustApply(t, r, registry.Register(short))
	if got := leaseOf(t, r, short); got != clientv3.NoLease {
		t.Fatalf("re-registered without TTL, %s kept lease %x", short.Key(), got)
	}
	if _, err := r.client.Revoke(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.List(testCtx(t), endpoint.Filter{}); len(got) != 3 {
		t.Fatalf("revoking the old lease removed entries: List = %v", got)
	}
}

// A lease revoked behind the registry's back is replaced on the next write.
func TestLeaseNotFoundIsReplaced(t *testing.T) {
	r := open(t)
	a := withTTL(ep("prod", "web", "http", "10.0.0.1", 80), 30*time.Second)
	mustApply(t, r, registry.Register(a))
	if _, err := r.client.Revoke(testCtx(t), leaseOf(t, r, a)); err != nil {
		t.Fatal(err)
	}
	mustApply(t, r, registry.Register(a))
	if id := leaseOf(t, r, a); id == clientv3.NoLease {
		t.Fatal("a was written without a lease")
	}
}

func TestBucketWidth(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Second, time.Second},
		{10 * time.Second, time.Second},
		{11 * time.Second, 2 * time.Second},
		{30 * time.Second, 3 * time.Second},
		{5 * time.Minute, 30 * time.Second},
		{24 * time.Hour, time.Minute},
	} {
		if got := bucketWidth(c.ttl); got != c.want {
			t.Errorf("bucketWidth(%s) = %s, want %s", c.ttl, got, c.want)
		}
	}
}

func TestInvalidFilterRejected(t *testing.T) {
	r := open(t)
	for _, f := range []endpoint.Filter{{Service: "web/prod"}, {Address: "not-an-ip"}} {
		if _, err := r.List(testCtx(t), f); !errors.Is(err, endpoint.ErrInvalid) {
			t.Errorf("List(%+v) error = %v, want endpoint.ErrInvalid", f, err)
		}
		if _, err := r.Watch(testCtx(t), f); !errors.Is(err, endpoint.ErrInvalid) {
			t.Errorf("Watch(%+v) error = %v, want endpoint.ErrInvalid", f, err)
		}
	}
}

func TestWatchAfterCloseFails(t *testing.T) {
	r := open(t)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Watch(testCtx(t), endpoint.Filter{}); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want registry.ErrClosed", err)
	}
}
