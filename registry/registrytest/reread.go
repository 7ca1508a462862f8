package registrytest

import (
	"context"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// checkWatchReread forces a watch to re-read the backend's whole state — what a
// backend does after a reconnect, a compaction or a lost feed — once with nothing
// changed and once with changes made while no feed was open, and checks that the
// watcher sees only the differences: no Removed and Added again for an unchanged
// entry, no second Added, nothing for an entry the filter leaves out. The re-read is
// a fresh watch of the backend's driver, handed to a registry.Front as
// registry.Reread, so every backend with a change feed is checked the same way.
func checkWatchReread(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	front, ok := r.(*registry.Front)
	if !ok || !front.CanWatch() {
		return fmt.Errorf("%w: not a registry.Front with a change feed", ErrSkipped)
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	c := ep("prod", "web", "http", "10.0.0.3", 80)
	if err := apply(ctx, r, registry.Register(a), registry.Register(b), registry.Register(c)); err != nil {
		return err
	}
	rr := &rereading{wd: front.Driver().(registry.WatchDriver), rereads: make(chan rereadCall)}
	fr := registry.NewFront(front.Name(), rr)
	defer func() { _ = fr.Close() }()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watch(wctx, fr, endpoint.Filter{Service: "web"})
	if err != nil {
		return err
	}
	if err := expectSynced(ctx, ch, h.opts.Wait, a, b, c); err != nil {
		return err
	}
	if err := rr.reread(ctx, nil); err != nil {
		return err
	}
	if err := expectQuiet(ctx, ch, 300*time.Millisecond); err != nil {
		return fmt.Errorf("after a re-read of an unchanged state: %w", err)
	}
	b2 := b.Clone()
	b2.Weight = 9
	d := ep("prod", "web", "http", "10.0.0.4", 80)
	other := ep("prod", "db", "tcp", "10.0.0.5", 5432)
	if err := rr.reread(ctx, func() error {
		return apply(ctx, r, registry.Register(b2), registry.Unregister(c), registry.Register(d), registry.Register(other))
	}); err != nil {
		return err
	}
	return expectDifferences(ctx, ch, h, r, c, b2, d)
}

// expectDifferences checks the events of a re-read that removed gone, changed
// changed and added added, then that the watch goes on with live changes.
func expectDifferences(ctx context.Context, ch <-chan registry.Event, h *harness, r registry.Registry, gone, changed, added endpoint.Endpoint) error {
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Removed, gone); err != nil {
		return fmt.Errorf("after a re-read: %w", err)
	}
	ev, err := expectEvent(ctx, ch, h.opts.Wait, registry.Updated, changed)
	if err != nil {
		return fmt.Errorf("after a re-read: %w", err)
	}
	if !endpoint.Equal(ev.Endpoint, changed) {
		return fmt.Errorf("after a re-read: Updated carries %+v, want %+v", ev.Endpoint, changed)
	}
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Added, added); err != nil {
		return fmt.Errorf("after a re-read: %w", err)
	}
	if err := expectQuiet(ctx, ch, 300*time.Millisecond); err != nil {
		return fmt.Errorf("after a re-read's differences: %w", err)
	}
	e := ep("prod", "web", "http", "10.0.0.6", 80)
	if err := apply(ctx, r, registry.Register(e)); err != nil {
		return err
	}
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Added, e); err != nil {
		return fmt.Errorf("a change after a re-read: %w", err)
	}
	return nil
}

// rereading is a driver with one watch at a time whose feed reread replaces with a
// fresh watch of the backend, announced as registry.Reread. Its Apply, List and
// Close do nothing: the check writes through the backend's own Front, which also
// closes the backend.
type rereading struct {
	wd      registry.WatchDriver
	rereads chan rereadCall
}

// rereadCall asks the watch to re-read; between, if not nil, runs while no feed is
// open. done gets the outcome.
type rereadCall struct {
	between func() error
	done    chan error
}

func (*rereading) Apply(context.Context, []registry.Op) error { return nil }
func (*rereading) Close() error                               { return nil }
func (*rereading) List(context.Context, endpoint.Filter) ([]endpoint.Endpoint, error) {
	return nil, nil
}

// reread makes the open watch re-read the backend's state, with between's changes.
func (r *rereading) reread(ctx context.Context, between func() error) error {
	call := rereadCall{between: between, done: make(chan error, 1)}
	select {
	case r.rereads <- call:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *rereading) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	in, stop, err := r.open(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make(chan registry.Event)
	go func() {
		defer close(out)
		defer func() { stop() }()
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case call := <-r.rereads:
				stop()
				in, stop, err = r.restart(ctx, f, call.between, out)
				call.done <- err
				if err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// restart runs between with no feed open, then opens a fresh one and announces it
// as a re-read.
func (r *rereading) restart(ctx context.Context, f endpoint.Filter, between func() error, out chan<- registry.Event) (<-chan registry.Event, func(), error) {
	nothing := func() {}
	if between != nil {
		if err := between(); err != nil {
			return nil, nothing, err
		}
	}
	in, stop, err := r.open(ctx, f)
	if err != nil {
		return nil, nothing, err
	}
	select {
	case out <- registry.Event{Type: registry.Reread}:
		return in, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nothing, ctx.Err()
	}
}

// open opens a watch of the backend; stop ends it and waits for its channel.
func (r *rereading) open(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	in, err := r.wd.Watch(wctx, f)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return in, func() {
		cancel()
		for range in {
		}
	}, nil
}
