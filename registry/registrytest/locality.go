package registrytest

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The checks of this file hold backends to region, zone and health: proxies route by
// them, so a backend that drops them, or a watch that misses a health change, sends
// traffic to endpoints that are draining or far away.

// localized returns the suite's endpoints with locality: one with region, zone and
// Draining, one with a zone alone and Unhealthy.
func localized() (full, zoneOnly endpoint.Endpoint) {
	full = ep("prod", "web", "http", "10.0.0.1", 80)
	full.Region, full.Zone, full.Health = "eu-west", "eu-west-1a", endpoint.Draining
	full.Annotations = map[string]string{"team": "edge"}
	zoneOnly = ep("prod", "web", "http", "10.0.0.2", 80)
	zoneOnly.Zone, zoneOnly.Health = "zone_b", endpoint.Unhealthy
	return full, zoneOnly
}

// checkLocalityRoundTrip: region, zone and health come back from List, from a watch's
// initial state and from its live events as they were written.
func checkLocalityRoundTrip(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	live, err := syncedWatch(ctx, wctx, h, r)
	if err != nil {
		return err
	}
	full, zoneOnly := localized()
	for _, e := range []endpoint.Endpoint{full, zoneOnly} {
		if err := apply(ctx, r, registry.Register(e)); err != nil {
			return err
		}
		if err := expectExact(ctx, live, h, registry.Added, e); err != nil {
			return fmt.Errorf("live watch: %w", err)
		}
	}
	for _, f := range []endpoint.Filter{{}, {Service: "web"}} {
		if err := expectList(ctx, r, f, full, zoneOnly); err != nil {
			return err
		}
	}
	late, err := watchIfAny(wctx, r)
	if err != nil || late == nil {
		return err
	}
	return expectInitial(ctx, late, h, full, zoneOnly)
}

// checkWatchHealthChange: a re-registration that changes health alone is an update
// that watchers see, both ways (to healthy, where some backends omit the field, and
// away from it), and List shows it.
func checkWatchHealthChange(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	full, _ := localized()
	if err := apply(ctx, r, registry.Register(full)); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watch(wctx, r, endpoint.Filter{Service: "web"})
	if err != nil {
		return err
	}
	if err := expectInitial(ctx, ch, h, full); err != nil {
		return err
	}
	for _, health := range []endpoint.Health{endpoint.Healthy, endpoint.Unhealthy, endpoint.Draining} {
		next := full.Clone()
		next.Health = health
		if err := apply(ctx, r, registry.Register(next)); err != nil {
			return err
		}
		if err := expectExact(ctx, ch, h, registry.Updated, next); err != nil {
			return fmt.Errorf("health %s -> %s: %w", full.Health, health, err)
		}
		if err := expectList(ctx, r, endpoint.Filter{}, next); err != nil {
			return fmt.Errorf("health %s -> %s: %w", full.Health, health, err)
		}
		full = next
	}
	return nil
}

// syncedWatch opens a watch of everything and consumes its empty initial state; nil
// without a change feed.
func syncedWatch(ctx, wctx context.Context, h *harness, r registry.Registry) (<-chan registry.Event, error) {
	ch, err := watchIfAny(wctx, r)
	if err != nil || ch == nil {
		return nil, err
	}
	if err := expectSynced(ctx, ch, h.opts.Wait); err != nil {
		return nil, err
	}
	return ch, nil
}

// watchIfAny is watch, with nil and no error for a backend without a change feed:
// what such a backend stores is still checked through List.
func watchIfAny(ctx context.Context, r registry.Registry) (<-chan registry.Event, error) {
	ch, err := watch(ctx, r, endpoint.Filter{})
	if errors.Is(err, ErrSkipped) {
		return nil, nil
	}
	return ch, err
}

// expectExact receives one event of type t carrying exactly want (every field); a
// nil ch expects nothing.
func expectExact(ctx context.Context, ch <-chan registry.Event, h *harness, t registry.EventType, want endpoint.Endpoint) error {
	if ch == nil {
		return nil
	}
	ev, err := expectEvent(ctx, ch, h.opts.Wait, t, want)
	if err != nil {
		return err
	}
	if !endpoint.Equal(ev.Endpoint, want) {
		return fmt.Errorf("%s event changed the endpoint:\n got %+v\nwant %+v", t, ev.Endpoint, want)
	}
	return nil
}

// expectInitial consumes a watch's initial state, which must be exactly want, every
// field, in any order, then Synced.
func expectInitial(ctx context.Context, ch <-chan registry.Event, h *harness, want ...endpoint.Endpoint) error {
	pending := map[endpoint.Key]endpoint.Endpoint{}
	for _, e := range want {
		pending[e.Key()] = e
	}
	for {
		ev, err := next(ctx, ch, h.opts.Wait)
		if err != nil {
			return fmt.Errorf("initial state: %w", err)
		}
		w, ok := pending[ev.Endpoint.Key()]
		switch {
		case ev.Type == registry.Synced && len(pending) == 0:
			return nil
		case ev.Type == registry.Synced:
			return fmt.Errorf("initial state: Synced before %d endpoint(s) were sent", len(pending))
		case ev.Type != registry.Added || !ok:
			return fmt.Errorf("initial state: unexpected event %s %s", ev.Type, ev.Endpoint.Key())
		case !endpoint.Equal(ev.Endpoint, w):
			return fmt.Errorf("initial state changed the endpoint:\n got %+v\nwant %+v", ev.Endpoint, w)
		}
		delete(pending, ev.Endpoint.Key())
	}
}

// expectList lists with f and compares every field of every endpoint, in order.
func expectList(ctx context.Context, r registry.Registry, f endpoint.Filter, want ...endpoint.Endpoint) error {
	got, err := list(ctx, r, f)
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("List(%+v) = %s, want %s", f, fmtKeys(keys(got)), fmtKeys(keys(want)))
	}
	for i := range want {
		if !endpoint.Equal(got[i], want[i]) {
			return fmt.Errorf("List(%+v) changed the endpoint:\n got %+v\nwant %+v", f, got[i], want[i])
		}
	}
	return nil
}
