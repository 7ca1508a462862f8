package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases hands out one lease per (TTL, time bucket); see "TTLs and leases" in
// doc.go for why this gives every write a fresh expiry without keepalives.
type leases struct {
	grant func(ctx context.Context, seconds int64) (clientv3.LeaseID, error)
	now   func() time.Time

	// mu is held across a grant so that concurrent writers with one TTL share a
	// lease instead of each granting one. Grants happen once per bucket, so the
	// wait is rare.
	mu      sync.Mutex
	current map[time.Duration]bucket
}

type bucket struct {
	id    clientv3.LeaseID
	start time.Time
	width time.Duration
}

func newLeases(l clientv3.Lease) *leases {
	return &leases{
		grant: func(ctx context.Context, seconds int64) (clientv3.LeaseID, error) {
			resp, err := l.Grant(ctx, seconds)
			if err != nil {
				return 0, err
			}
			return resp.ID, nil
		},
		now:     time.Now,
		current: map[time.Duration]bucket{},
	}
}

// bucketWidth is how long one lease takes new keys for a TTL: a tenth of it, in
// whole seconds (lease TTLs are seconds), between 1s and 1m. It is also the most an
// entry can outlive its TTL.
func bucketWidth(ttl time.Duration) time.Duration {
	w := (ttl/10 + time.Second - 1).Truncate(time.Second)
	return min(max(w, time.Second), time.Minute)
}

// get returns the lease for keys written now with the given TTL, granting one if
// the current bucket has ended.
func (ls *leases) get(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	// Read the clock before the grant: the bucket is measured from no later than the
	// server's grant, so a key attached within the width still has the full TTL left.
	now := ls.now()
	if b, ok := ls.current[ttl]; ok && now.Sub(b.start) < b.width {
		return b.id, nil
	}
	w := bucketWidth(ttl)
	id, err := ls.grant(ctx, int64((ttl+w+time.Second-1)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("grant lease for ttl %s: %w", ttl, err)
	}
	ls.sweep(now)
	ls.current[ttl] = bucket{id: id, start: now, width: w}
	return id, nil
}

// reset drops every cached lease, after the server reported one unknown (revoked
// by hand, or lost with its data), so the next get grants anew.
func (ls *leases) reset() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	clear(ls.current)
}

// sweep drops buckets that ended, so TTL values no longer written do not pile up.
func (ls *leases) sweep(now time.Time) {
	for ttl, b := range ls.current {
		if now.Sub(b.start) >= b.width {
			delete(ls.current, ttl)
		}
	}
}
