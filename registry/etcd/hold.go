package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A hold is one lease kept alive for one writer (a registrar replica): the entries
// it registers under the hold are attached to the lease, so they cost one write each
// and none per refresh, and go with the lease when the writer dies. See
// registry.Holder.
type hold struct {
	ttl   time.Duration
	lease atomic.Int64 // the current clientv3.LeaseID; replaced if the server drops it
}

// holds maps each HoldID this driver gave out to its lease.
type holds struct {
	mu sync.Mutex
	m  map[registry.HoldID]*hold
}

// Hold grants a lease of ttl (failing if that takes longer than ttl) and keeps it
// alive until ctx ends, granting a new one
// under the same ID if the server drops it (a partition longer than ttl). Nothing
// revokes it: when ctx ends its entries live ttl more, for their agents to re-home.
func (r *driver) Hold(ctx context.Context, ttl time.Duration) (registry.HoldID, error) {
	h := &hold{ttl: ttl}
	gctx, cancel := context.WithTimeout(ctx, ttl) // a hold not granted within its ttl is no use
	id, err := r.grantHold(gctx, h)
	cancel()
	if err != nil {
		return "", err
	}
	hid := registry.HoldID(fmt.Sprintf("etcd-lease-%016x", int64(id)))
	r.holds.mu.Lock()
	if r.holds.m == nil {
		r.holds.m = map[registry.HoldID]*hold{}
	}
	r.holds.m[hid] = h
	r.holds.mu.Unlock()
	go r.keepHold(ctx, hid, h)
	return hid, nil
}

func (r *driver) grantHold(ctx context.Context, h *hold) (clientv3.LeaseID, error) {
	resp, err := r.client.Grant(ctx, int64((h.ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("etcd: grant hold lease: %w", classify(ctx, err))
	}
	h.lease.Store(int64(resp.ID))
	return resp.ID, nil
}

// keepHold renews the hold's lease until ctx ends. The client's KeepAlive retries
// through lost connections by itself, but ends (its channel closes) both when the
// lease is gone and when it heard nothing of it for the lease's TTL, though the
// server may still have it: etcd extends every lease when a member becomes leader,
// as after a restart. So when it ends, the server is asked at once: a lease it still
// has is renewed again, and its entries stay; only a lease gone is replaced by a new
// one, whose writer registers the entries again.
//
// The hold stays known after ctx ends: its lease lives ttl more, and writes still
// under way (a registrar persisting its last writes at shutdown) may use it.
func (r *driver) keepHold(ctx context.Context, hid registry.HoldID, h *hold) {
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: h.ttl / 3}
	for ctx.Err() == nil {
		began := time.Now()
		ch, err := r.client.KeepAlive(ctx, clientv3.LeaseID(h.lease.Load()))
		if err == nil {
			for range ch { //nolint:revive // each answer is a renewal; only the close matters
			}
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > h.ttl {
			b.Reset() // it renewed for a while: not a keepalive that ends at once
		}
		if r.leaseAlive(ctx, h, &b) {
			if !b.Wait(ctx) { // a keepalive that ends at once again must not spin
				return
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("etcd: hold lease lost; granting a new one (the entries it held are gone)", "hold", hid, "err", err)
		r.regrant(ctx, h, &b)
	}
}

// leaseAlive asks the server whether the hold's lease still has time left, at once,
// then again after each step of b until it answers or ctx ends: while the backend is
// out, the lease's fate is unknown, and a new lease would leave the old one's
// entries to expire if the server kept it.
func (r *driver) leaseAlive(ctx context.Context, h *hold, b *backoff.Backoff) bool {
	for {
		tctx, cancel := context.WithTimeout(ctx, h.ttl/3)
		resp, err := r.client.TimeToLive(tctx, clientv3.LeaseID(h.lease.Load()))
		cancel()
		if err == nil {
			return resp.TTL > 0
		}
		if !b.Wait(ctx) {
			return false
		}
	}
}

// regrant grants the hold a new lease, retrying until it gets one or ctx ends.
func (r *driver) regrant(ctx context.Context, h *hold, b *backoff.Backoff) {
	for ctx.Err() == nil {
		if _, err := r.grantHold(ctx, h); err == nil {
			b.Reset()
			return
		}
		if !b.Wait(ctx) {
			return
		}
	}
}

// heldLease returns the lease of a hold this driver gave out.
func (r *driver) heldLease(hid registry.HoldID) (clientv3.LeaseID, error) {
	r.holds.mu.Lock()
	h := r.holds.m[hid]
	r.holds.mu.Unlock()
	if h == nil {
		return 0, fmt.Errorf("etcd: %w: unknown or ended hold %q", registry.ErrNoHold, hid)
	}
	return clientv3.LeaseID(h.lease.Load()), nil
}

// heldOp is the Txn operation of an op under a hold: a Put attached to its lease, or
// a Delete that happens only while the key is still attached to it (a nested Txn, so
// that one batch can mix them).
func (r *driver) heldOp(key, value string, op registry.Op) (clientv3.Op, error) {
	lease, err := r.heldLease(op.Hold)
	if err != nil {
		return clientv3.Op{}, err
	}
	if op.Kind == registry.OpRegister {
		return clientv3.OpPut(key, value, clientv3.WithLease(lease)), nil
	}
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", lease)},
		[]clientv3.Op{clientv3.OpDelete(key)}, nil), nil
}
