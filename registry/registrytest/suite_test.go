package registrytest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

// broken wraps the memory backend and breaks one rule; each case names the check
// that must catch it. A suite that passed a broken backend would be worthless.
type broken struct {
	*registry.Front
	apply func(r *registry.Front, ctx context.Context, ops []registry.Op) error
	list  func(r *registry.Front, ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error)
	watch func(r *registry.Front, ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error)
	close func(r *registry.Front) error
}

func (b *broken) Apply(ctx context.Context, ops []registry.Op) error {
	if b.apply != nil {
		return b.apply(b.Front, ctx, ops)
	}
	return b.Front.Apply(ctx, ops)
}

func (b *broken) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	if b.list != nil {
		return b.list(b.Front, ctx, f)
	}
	return b.Front.List(ctx, f)
}

func (b *broken) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	if b.watch != nil {
		return b.watch(b.Front, ctx, f)
	}
	return b.Front.Watch(ctx, f)
}

func (b *broken) Close() error {
	if b.close != nil {
		return b.close(b.Front)
	}
	return b.Front.Close()
}

// rewire passes the memory watch through relay, which reads the backend's events and
// sends what it wants the suite to see.
func rewire(relay func(in <-chan registry.Event, out chan<- registry.Event)) func(*registry.Front, context.Context, endpoint.Filter) (<-chan registry.Event, error) {
	return func(r *registry.Front, ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
		in, err := r.Watch(ctx, f)
		if err != nil {
			return nil, err
		}
		out := make(chan registry.Event)
		go func() {
			defer close(out)
			relay(in, out)
		}()
		return out, nil
	}
}

// filterEvents passes through the memory watch but drops events that skip says to.
func filterEvents(skip func(registry.Event) bool) func(*registry.Front, context.Context, endpoint.Filter) (<-chan registry.Event, error) {
	return rewire(func(in <-chan registry.Event, out chan<- registry.Event) {
		for ev := range in {
			if !skip(ev) {
				out <- ev
			}
		}
	})
}

// hideExpiry passes through the memory watch, but when an endpoint's Removed is
// followed at once by its Added, sends only the Added: a watcher is told of the entry
// twice without its removal between, as the memory backend once did when an expired
// entry was registered again before its reaping.
var hideExpiry = rewire(func(in <-chan registry.Event, out chan<- registry.Event) {
	var held *registry.Event
	for {
		var timeout <-chan time.Time
		if held != nil {
			timeout = time.After(100 * time.Millisecond)
		}
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			switch {
			case ev.Type == registry.Removed:
				held = &ev
				continue
			case held != nil && ev.Type == registry.Added && ev.Endpoint.Key() == held.Endpoint.Key():
				held = nil
			case held != nil:
				out <- *held
				held = nil
			}
			out <- ev
		case <-timeout:
			out <- *held
			held = nil
		}
	}
})

// healthBlind passes through the memory watch but drops an Updated that changes only
// the endpoint's health, as a backend comparing entries without it would.
var healthBlind = rewire(func(in <-chan registry.Event, out chan<- registry.Event) {
	last := map[endpoint.Key]endpoint.Endpoint{}
	for ev := range in {
		k := ev.Endpoint.Key()
		prev, held := last[k]
		last[k] = ev.Endpoint.Clone()
		if ev.Type == registry.Updated && held {
			prev.Health = ev.Endpoint.Health
			if endpoint.Equal(prev, ev.Endpoint) {
				continue
			}
		}
		out <- ev
	}
})

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	cases := []struct {
		name    string
		b       broken
		catches []string
	}{
		{"unsorted list", broken{list: func(r *registry.Front, ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
			eps, err := r.List(ctx, f)
			slices.Reverse(eps)
			return eps, err
		}}, []string{"SortOrder", "Filters"}},
		{"filter ignored", broken{list: func(r *registry.Front, ctx context.Context, _ endpoint.Filter) ([]endpoint.Endpoint, error) {
			return r.List(ctx, endpoint.Filter{})
		}}, []string{"Filters"}},
		{"unregister ignored", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			ops = slices.DeleteFunc(slices.Clone(ops), func(op registry.Op) bool { return op.Kind == registry.OpUnregister })
			return r.Apply(ctx, ops)
		}}, []string{"Unregister", "BatchNetsOut", "LargeBatch"}},
		{"unregister of missing key fails", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			for _, op := range ops {
				if op.Kind == registry.OpUnregister {
					if eps, _ := r.List(ctx, endpoint.Filter{Address: op.Endpoint.Address}); len(eps) == 0 {
						return errors.New("not found")
					}
				}
			}
			return r.Apply(ctx, ops)
		}}, []string{"UnregisterMissing"}},
		{"ops applied one by one, last first", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			for _, op := range slices.Backward(ops) {
				if err := r.Apply(ctx, []registry.Op{op}); err != nil {
					return err
				}
			}
			return nil
		}}, []string{"BatchNetsOut"}},
		{"partial writes on invalid batch", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			var firstErr error
			for _, op := range ops {
				if err := r.Apply(ctx, []registry.Op{op}); err != nil && firstErr == nil {
					firstErr = err
				}
			}
			return firstErr
		}}, []string{"InvalidRejected"}},
		{"no validation", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			ops = slices.DeleteFunc(slices.Clone(ops), func(op registry.Op) bool { return registry.Validate([]registry.Op{op}) != nil })
			return r.Apply(ctx, ops)
		}}, []string{"InvalidRejected"}},
		{"ttl ignored", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			ops = slices.Clone(ops)
			for i := range ops {
				if ops[i].Endpoint.TTL > 0 {
					ops[i].Endpoint.TTL = 0
				}
			}
			return r.Apply(ctx, ops)
		}}, []string{"TTLExpiry", "WatchExpiry", "ReregisterExpired"}},
		{"fields dropped", broken{list: func(r *registry.Front, ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
			eps, err := r.List(ctx, f)
			for i := range eps {
				eps[i].Annotations = nil
			}
			return eps, err
		}}, []string{"FieldsRoundTrip", "ReregisterUpdatesInPlace"}},
		{"updates not watched", broken{watch: filterEvents(func(ev registry.Event) bool { return ev.Type == registry.Updated })}, []string{"WatchChangesInOrder"}},
		{"removals not watched", broken{watch: filterEvents(func(ev registry.Event) bool { return ev.Type == registry.Removed })}, []string{"WatchChangesInOrder", "WatchExpiry", "ReregisterExpired"}},
		{"no synced marker", broken{watch: filterEvents(func(ev registry.Event) bool { return ev.Type == registry.Synced })}, []string{"WatchInitialState", "WatchChangesInOrder"}},
		{"initial state missing", broken{watch: filterEvents(func(ev registry.Event) bool { return ev.Type == registry.Added && ev.Endpoint.Address == "10.0.0.2" })}, []string{"WatchInitialState"}},
		{"close not idempotent", broken{close: func(r *registry.Front) error {
			if _, err := r.List(context.Background(), endpoint.Filter{}); errors.Is(err, registry.ErrClosed) {
				return errors.New("already closed")
			}
			return r.Close()
		}}, []string{"CloseIdempotent"}},
		{"writes after close accepted", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			if err := r.Apply(ctx, ops); errors.Is(err, registry.ErrClosed) {
				return nil
			}
			return r.Apply(ctx, ops)
		}}, []string{"CloseIdempotent"}},
		{"filter not validated", broken{list: func(r *registry.Front, ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
			eps, err := r.List(ctx, f)
			if errors.Is(err, endpoint.ErrInvalid) {
				return []endpoint.Endpoint{}, nil // the typo answered with nothing
			}
			return eps, err
		}}, []string{"InvalidFilterRejected"}},
		{"watch after close accepted", broken{watch: func(r *registry.Front, ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
			ch, err := r.Watch(ctx, f)
			if errors.Is(err, registry.ErrClosed) {
				c := make(chan registry.Event)
				close(c)
				return c, nil
			}
			return ch, err
		}}, []string{"WatchAfterClose"}},
		{"watch outlives its context", broken{watch: func(r *registry.Front, ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
			return r.Watch(context.WithoutCancel(ctx), f)
		}}, []string{"WatchContextCancel"}},
		{"close does not wait for calls", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			ctx.Done() // underway, as far as anyone can tell
			time.Sleep(200 * time.Millisecond)
			return r.Apply(ctx, ops)
		}}, []string{"CloseWaitsForCalls"}},
		{"expired entry comes back without its removal", broken{watch: hideExpiry}, []string{"ReregisterExpired"}},
		{"locality dropped", broken{list: func(r *registry.Front, ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
			eps, err := r.List(ctx, f)
			for i := range eps {
				eps[i].Region, eps[i].Zone = "", ""
			}
			return eps, err
		}}, []string{"LocalityRoundTrip"}},
		{"health not stored", broken{apply: func(r *registry.Front, ctx context.Context, ops []registry.Op) error {
			ops = slices.Clone(ops)
			for i := range ops {
				ops[i].Endpoint.Health = endpoint.Healthy
			}
			return r.Apply(ctx, ops)
		}}, []string{"LocalityRoundTrip", "WatchHealthChange"}},
		{"health dropped from watch events", broken{watch: rewire(func(in <-chan registry.Event, out chan<- registry.Event) {
			for ev := range in {
				ev.Endpoint.Health = endpoint.Healthy
				out <- ev
			}
		})}, []string{"LocalityRoundTrip", "WatchHealthChange"}},
		{"health-only changes not watched", broken{watch: healthBlind}, []string{"WatchHealthChange"}},
	}
	opts := registrytest.Options{Wait: 2 * time.Second}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			failed := registrytest.Check(func() (registry.Registry, error) {
				b := c.b
				b.Front = memory.New()
				return &b, nil
			}, opts)
			for _, name := range c.catches {
				if failed[name] == nil {
					t.Errorf("check %s passed a backend with %q", name, c.name)
				}
			}
		})
	}
}

// lossyState is a driver whose watch's reads of the whole state lose the endpoints'
// weight, as a backend whose state read decodes fewer fields than its feed would.
type lossyState struct{ registry.Driver }

func (d lossyState) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	in, err := d.Driver.(registry.WatchDriver).Watch(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make(chan registry.Event)
	go func() {
		defer close(out)
		synced := false
		for ev := range in {
			if !synced && ev.Type == registry.Added {
				ev.Endpoint.Weight = 0
			}
			synced = synced || ev.Type == registry.Synced
			out <- ev
		}
	}()
	return out, nil
}

// A re-read is checked against the state it should find: a backend whose re-read
// misses a change is caught.
func TestSuiteCatchesAStateReadThatLosesAField(t *testing.T) {
	failed := registrytest.Check(func() (registry.Registry, error) {
		return registry.NewFront("lossy", lossyState{memory.New().Driver()}), nil
	}, registrytest.Options{Wait: 2 * time.Second})
	if failed["WatchRereadSendsDifferences"] == nil {
		t.Error("check WatchRereadSendsDifferences passed a backend whose re-read loses a field")
	}
}

func TestWatchChecksSkipWithoutChangeFeed(t *testing.T) {
	failed := registrytest.Check(func() (registry.Registry, error) {
		// A front over a driver that has no Watch, as Cloud Map's.
		return registry.NewFront("nofeed", struct{ registry.Registry }{memory.New()}), nil
	}, registrytest.Options{Wait: 2 * time.Second})
	for _, name := range []string{"WatchInitialState", "WatchChangesInOrder", "WatchExpiry", "WatchContextCancel", "ReregisterExpired", "WatchHealthChange", "WatchRereadSendsDifferences"} {
		if !errors.Is(failed[name], registrytest.ErrSkipped) {
			t.Errorf("%s = %v, want ErrSkipped", name, failed[name])
		}
	}
	for name, err := range failed {
		if !errors.Is(err, registrytest.ErrSkipped) {
			t.Errorf("%s failed on a healthy backend without watch: %v", name, err)
		}
	}
}

func TestMemoryPassesEveryCheck(t *testing.T) {
	failed := registrytest.Check(func() (registry.Registry, error) { return memory.New(), nil }, registrytest.Options{})
	for name, err := range failed {
		t.Errorf("%s: %v", name, err)
	}
	if len(registrytest.Checks()) < 23 {
		t.Fatalf("suite has only %d checks", len(registrytest.Checks()))
	}
}
