package registry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HoldID names one liveness record a driver keeps for one writer (see Holder).
type HoldID string

// ErrNoHold is returned by Front.Hold, and by Apply for an op that names a hold, when
// the backend cannot keep entries alive by a writer's liveness.
var ErrNoHold = errors.New("registry: backend cannot hold entries by a writer's liveness")

// Holder is implemented by drivers that can keep entries alive by one writer's
// liveness instead of by each entry's TTL. A registrar replica takes one hold: the
// agents behind it keep their entries alive by staying connected to it, and it writes
// each entry once, not once per refresh. Backend writes then follow changes, not the
// number of endpoints.
//
// Hold starts a liveness record, renewed by the driver while ctx lives, and returns
// its ID; it fails if the record cannot be made within ttl. An Op whose Hold is that ID:
//   - Register stores the endpoint with no expiry of its own (its TTL is kept as a
//     value): it lives while the hold does, and goes at most ttl after the hold's last
//     renewal, when its writer dies or stops holding. The hold is left to expire, not
//     released, when ctx ends: a replica's entries outlive its shutdown long enough
//     for their agents to re-home, and the replica they re-home to takes each over by
//     registering it under its own hold.
//   - Unregister removes the endpoint only while it is still under that hold: an
//     entry another writer has taken over stays.
//
// A hold whose record the backend dropped (a partition longer than ttl) is renewed
// under the same ID; the entries it held are gone from the backend (watchers see them
// Removed) and their writer must register them again.
type Holder interface {
	Hold(ctx context.Context, ttl time.Duration) (HoldID, error)
}

// HoldRefresher is implemented by drivers whose held entries also expire on their
// own, after a long time, so that a reader that knows nothing of holds (one of
// another project, reading the same store) still sees a dead writer's entries go. A
// writer that holds must register each of its held entries again, under its hold,
// at least once per HoldRefresh; a driver without it (or returning 0) keeps held
// entries for as long as their hold lives.
type HoldRefresher interface {
	HoldRefresh() time.Duration
}

// HoldRefresh is how often a held entry must be registered again (see
// HoldRefresher); 0 is never.
func (f *Front) HoldRefresh() time.Duration {
	if h, ok := f.d.(HoldRefresher); ok {
		return h.HoldRefresh()
	}
	return 0
}

// MinHoldTTL is the shortest hold accepted: etcd's leases and NATS's message TTLs
// have one-second granularity, and a renewal must fit in the time left.
const MinHoldTTL = 3 * time.Second

// Hold starts a liveness record for one writer (see Holder), or fails with ErrNoHold
// when the backend has none.
func (f *Front) Hold(ctx context.Context, ttl time.Duration) (HoldID, error) {
	h, ok := f.d.(Holder)
	if !ok {
		return "", fmt.Errorf("%w (%s)", ErrNoHold, f.name)
	}
	if ttl < MinHoldTTL {
		return "", fmt.Errorf("registry: hold ttl %s: must be at least %s", ttl, MinHoldTTL)
	}
	if err := f.enter(); err != nil {
		return "", err
	}
	defer f.done()
	return h.Hold(ctx, ttl)
}

// CanHold reports whether the backend can keep entries alive by a writer's liveness.
func (f *Front) CanHold() bool {
	_, ok := f.d.(Holder)
	return ok
}

// checkHolds refuses ops that name a hold on a backend without any.
func (f *Front) checkHolds(ops []Op) error {
	if f.CanHold() {
		return nil
	}
	for _, op := range ops {
		if op.Hold != "" {
			return fmt.Errorf("%w (%s): op for %s names hold %q", ErrNoHold, f.name, op.Endpoint.Key(), op.Hold)
		}
	}
	return nil
}
