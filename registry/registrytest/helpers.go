package registrytest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// ep returns a valid endpoint with the given identity.
func ep(cluster, service, protocol, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: 1}
}

func apply(ctx context.Context, r registry.Registry, ops ...registry.Op) error {
	if err := r.Apply(ctx, ops); err != nil {
		return fmt.Errorf("Apply: %w", err)
	}
	return nil
}

func list(ctx context.Context, r registry.Registry, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	eps, err := r.List(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("List(%+v): %w", f, err)
	}
	return eps, nil
}

func keys(eps []endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	return out
}

// expectKeys lists with f and compares the keys, in order, with want.
func expectKeys(ctx context.Context, r registry.Registry, f endpoint.Filter, want ...endpoint.Endpoint) error {
	got, err := list(ctx, r, f)
	if err != nil {
		return err
	}
	if g, w := keys(got), keys(want); !slices.Equal(g, w) {
		return fmt.Errorf("List(%+v) = %s, want %s", f, fmtKeys(g), fmtKeys(w))
	}
	return nil
}

func fmtKeys(ks []string) string { return "[" + strings.Join(ks, " ") + "]" }

// eventually polls cond until it reports true, fails, or wait runs out.
func eventually(ctx context.Context, wait time.Duration, what string, cond func() (bool, error)) error {
	return eventuallyEvery(ctx, wait, 50*time.Millisecond, what, cond)
}

// eventuallyEvery is eventually polling every interval.
func eventuallyEvery(ctx context.Context, wait, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(wait)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not true after %s", what, wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// watch opens a watch, or returns ErrSkipped if the backend has no change feed.
func watch(ctx context.Context, r registry.Registry, f endpoint.Filter) (<-chan registry.Event, error) {
	w, ok := r.(registry.Watcher)
	if !ok {
		return nil, fmt.Errorf("%w: backend does not implement registry.Watcher", ErrSkipped)
	}
	ch, err := w.Watch(ctx, f)
	if err != nil {
		if isNoWatch(err) {
			return nil, fmt.Errorf("%w: %v", ErrSkipped, err)
		}
		return nil, fmt.Errorf("Watch(%+v): %w", f, err)
	}
	return ch, nil
}

// next receives one event within wait.
func next(ctx context.Context, ch <-chan registry.Event, wait time.Duration) (registry.Event, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ev, ok := <-ch:
		if !ok {
			return registry.Event{}, fmt.Errorf("watch channel closed early")
		}
		return ev, nil
	case <-t.C:
		return registry.Event{}, fmt.Errorf("no watch event within %s", wait)
	case <-ctx.Done():
		return registry.Event{}, ctx.Err()
	}
}

// expectEvent receives one event and checks its type and key.
func expectEvent(ctx context.Context, ch <-chan registry.Event, wait time.Duration, t registry.EventType, want endpoint.Endpoint) (registry.Event, error) {
	ev, err := next(ctx, ch, wait)
	if err != nil {
		return ev, fmt.Errorf("waiting for %s %s: %w", t, want.Key(), err)
	}
	if ev.Type != t || (t != registry.Synced && ev.Endpoint.Key() != want.Key()) {
		return ev, fmt.Errorf("got event %s %s, want %s %s", ev.Type, ev.Endpoint.Key(), t, want.Key())
	}
	return ev, nil
}

// expectSynced consumes the initial state, which must be exactly want (in any order),
// followed by Synced.
func expectSynced(ctx context.Context, ch <-chan registry.Event, wait time.Duration, want ...endpoint.Endpoint) error {
	pending := map[endpoint.Key]bool{}
	for _, e := range want {
		pending[e.Key()] = true
	}
	for {
		ev, err := next(ctx, ch, wait)
		if err != nil {
			return fmt.Errorf("initial state: %w", err)
		}
		switch {
		case ev.Type == registry.Synced:
			if len(pending) > 0 {
				return fmt.Errorf("initial state: Synced before %d endpoint(s) were sent", len(pending))
			}
			return nil
		case ev.Type == registry.Added && pending[ev.Endpoint.Key()]:
			delete(pending, ev.Endpoint.Key())
		default:
			return fmt.Errorf("initial state: unexpected event %s %s", ev.Type, ev.Endpoint.Key())
		}
	}
}

// expectQuiet checks that no event arrives for a short while.
func expectQuiet(ctx context.Context, ch <-chan registry.Event, d time.Duration) error {
	select {
	case ev, ok := <-ch:
		if !ok {
			return fmt.Errorf("watch channel closed early")
		}
		return fmt.Errorf("unexpected event %s %s", ev.Type, ev.Endpoint.Key())
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
