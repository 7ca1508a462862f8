package registrytest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// holder is what a Front offers for registry.Holder.
type holder interface {
	CanHold() bool
	Hold(ctx context.Context, ttl time.Duration) (registry.HoldID, error)
}

// holdTTL is the shortest hold a backend takes (registry.MinHoldTTL).
const holdTTL = registry.MinHoldTTL

// checkHold holds a backend that can keep entries alive by a writer's liveness to
// registry.Holder: a held entry outlives its TTL while its hold lives, a held
// Unregister leaves an entry another hold took over, and a hold's entries go when it
// ends. Backends without holds must refuse an op that names one.
func checkHold(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	hr, ok := r.(holder)
	if !ok || !hr.CanHold() {
		return checkNoHold(ctx, r)
	}
	ctx1, end1 := context.WithCancel(ctx)
	defer end1()
	ctx2, end2 := context.WithCancel(ctx)
	defer end2()
	id1, err := hr.Hold(ctx1, holdTTL)
	if err != nil {
		return fmt.Errorf("Hold: %w", err)
	}
	id2, err := hr.Hold(ctx2, holdTTL)
	if err != nil {
		return fmt.Errorf("second Hold: %w", err)
	}
	if id1 == id2 {
		return fmt.Errorf("two holds share the ID %q", id1)
	}
	held := func(e endpoint.Endpoint, id registry.HoldID) registry.Op {
		return registry.Op{Kind: registry.OpRegister, Endpoint: e, Hold: id}
	}
	ttl := endpoint.TTL(h.opts.TTL)
	a, b, c, plain := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80),
		ep("prod", "web", "http", "10.0.0.3", 80), ep("prod", "web", "http", "10.0.0.4", 80)
	a.TTL, b.TTL, c.TTL, plain.TTL = ttl, ttl, ttl, ttl
	if err := apply(ctx, r, held(a, id1), held(b, id1), held(c, id1), registry.Register(plain)); err != nil {
		return err
	}
	if err := eventually(ctx, h.opts.TTL+h.opts.Wait, "the entry not held expires", func() (bool, error) {
		got, err := list(ctx, r, endpoint.Filter{})
		return len(got) == 3, err
	}); err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{}, a, b, c); err != nil {
		return fmt.Errorf("held entries past their TTL: %w", err)
	}
	// b is taken over by the second hold; the first hold's removal of it is refused.
	if err := apply(ctx, r, held(b, id2)); err != nil {
		return fmt.Errorf("take over under the second hold: %w", err)
	}
	unheld := func(e endpoint.Endpoint, id registry.HoldID) registry.Op {
		return registry.Op{Kind: registry.OpUnregister, Endpoint: e, Hold: id}
	}
	if err := apply(ctx, r, unheld(a, id1), unheld(b, id1)); err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{}, b, c); err != nil {
		return fmt.Errorf("after the first hold unregistered its own entry and one taken over: %w", err)
	}
	// The first hold ends: its entries go within its TTL, the second's stay.
	end1()
	if err := eventually(ctx, holdTTL+h.opts.Wait, "an ended hold's entries go", func() (bool, error) {
		got, err := list(ctx, r, endpoint.Filter{})
		return len(got) == 1, err
	}); err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{}, b)
}

// checkNoHold: a backend without holds refuses an op naming one, and writes nothing.
func checkNoHold(ctx context.Context, r registry.Registry) error {
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	err := r.Apply(ctx, []registry.Op{{Kind: registry.OpRegister, Endpoint: a, Hold: "h"}})
	if !errors.Is(err, registry.ErrNoHold) {
		return fmt.Errorf("Apply of a held op on a backend without holds: got %v, want ErrNoHold", err)
	}
	return expectKeys(ctx, r, endpoint.Filter{})
}
