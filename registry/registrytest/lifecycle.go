package registrytest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The checks of this file hold backends to the rules every registry shares: what
// counts as bad input, and how calls and watches end.

func checkInvalidFilter(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	// Something is stored, so that a backend answering from a cache has one.
	if err := apply(ctx, r, registry.Register(ep("prod", "web", "http", "10.0.0.1", 80))); err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{Service: "web"}, ep("prod", "web", "http", "10.0.0.1", 80)); err != nil {
		return err
	}
	bad := []struct {
		field string
		f     endpoint.Filter
	}{
		{"service", endpoint.Filter{Service: "9bad"}},
		{"cluster", endpoint.Filter{Cluster: "bad cluster"}},
		{"protocol", endpoint.Filter{Protocol: "ht.tp"}},
		{"address", endpoint.Filter{Service: "web", Address: "10.0.0.300"}},
	}
	for _, b := range bad {
		// A filter that cannot match anything is a typo: it must be reported, not
		// answered with an empty list.
		eps, err := r.List(ctx, b.f)
		if err := invalidFilterErr("List", b.field, b.f, err); err != nil {
			return fmt.Errorf("%w (it returned %d endpoints)", err, len(eps))
		}
	}
	if _, ok := r.(registry.Watcher); !ok {
		return nil
	}
	for _, b := range bad {
		wctx, cancel := context.WithCancel(ctx)
		_, err := r.(registry.Watcher).Watch(wctx, b.f)
		cancel()
		if isNoWatch(err) {
			return nil
		}
		if err := invalidFilterErr("Watch", b.field, b.f, err); err != nil {
			return err
		}
	}
	return nil
}

func invalidFilterErr(call, field string, f endpoint.Filter, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s(%+v) with an invalid %s was accepted", call, f, field)
	case !errors.Is(err, endpoint.ErrInvalid):
		return fmt.Errorf("%s(%+v) with an invalid %s: error %q does not match endpoint.ErrInvalid", call, f, field, err)
	case !strings.Contains(err.Error(), field):
		return fmt.Errorf("%s(%+v) with an invalid %s: error %q does not name the field", call, f, field, err)
	}
	return nil
}

func checkWatchAfterClose(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	w, ok := r.(registry.Watcher)
	if !ok {
		return fmt.Errorf("%w: backend does not implement registry.Watcher", ErrSkipped)
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	ch, err := w.Watch(ctx, endpoint.Filter{})
	if !errors.Is(err, registry.ErrClosed) {
		return fmt.Errorf("Watch after Close = (channel %v, %v), want registry.ErrClosed", ch != nil, err)
	}
	return nil
}

func checkWatchContextCancel(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	if err := apply(ctx, r, registry.Register(a)); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watchSynced(ctx, wctx, h, r, a)
	if err != nil {
		return err
	}
	cancel()
	if err := expectClosed(ctx, ch, h.opts.Wait); err != nil {
		return fmt.Errorf("after its context was cancelled: %w", err)
	}
	// The registry itself stays usable.
	return expectKeys(ctx, r, endpoint.Filter{}, a)
}

// expectClosed drains ch until it is closed, or fails after wait.
func expectClosed(ctx context.Context, ch <-chan registry.Event, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("watch channel still open after %s", wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// probeCtx reports the first time a call looks at its Done channel: a call does that
// once it is underway (deriving its own context, or waiting on a reply), so a probe
// that has fired says the call was admitted, and Close must wait for it.
type probeCtx struct {
	context.Context
	once sync.Once
	seen chan struct{}
}

func newProbe(ctx context.Context) *probeCtx {
	return &probeCtx{Context: ctx, seen: make(chan struct{})}
}

func (p *probeCtx) Done() <-chan struct{} {
	p.once.Do(func() { close(p.seen) })
	return p.Context.Done()
}

func checkCloseWaitsForCalls(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	// Stored first, so the List has something to read.
	const n = 300
	ops := make([]registry.Op, n)
	for i := range n {
		ops[i] = registry.Register(ep("prod", "bulk", "http", fmt.Sprintf("10.4.%d.%d", i/256, i%256), 8080))
	}
	if err := apply(ctx, r, ops...); err != nil {
		return err
	}
	for i := range ops {
		ops[i] = registry.Unregister(ops[i].Endpoint)
	}
	applyCtx, listCtx := newProbe(ctx), newProbe(ctx)
	applied, listed := make(chan error, 1), make(chan error, 1)
	go applyCall(r, applyCtx, ops, applied)
	go listCall(r, listCtx, listed)
	// Close once both calls are underway (or already over).
	for _, c := range []struct {
		probe *probeCtx
		done  chan error
	}{{applyCtx, applied}, {listCtx, listed}} {
		select {
		case <-c.probe.seen:
		case err := <-c.done:
			c.done <- err
		case <-time.After(h.opts.Wait):
			return fmt.Errorf("a call did not start within %s", h.opts.Wait)
		}
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	if still := callsInFlight(); len(still) > 0 {
		return fmt.Errorf("%s still running when Close returned: Close must wait for calls in flight", strings.Join(still, " and "))
	}
	for name, done := range map[string]chan error{"Apply": applied, "List": listed} {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, registry.ErrClosed) {
				return fmt.Errorf("%s cut short by Close = %v, want nil or registry.ErrClosed", name, err)
			}
		case <-time.After(h.opts.Wait):
			return fmt.Errorf("%s did not return within %s of Close", name, h.opts.Wait)
		}
	}
	return nil
}

// applyCall and listCall run one call each and report its result; callsInFlight finds
// them by name in the goroutine stacks.
func applyCall(r registry.Registry, ctx context.Context, ops []registry.Op, done chan<- error) {
	done <- r.Apply(ctx, ops)
}

func listCall(r registry.Registry, ctx context.Context, done chan<- error) {
	_, err := r.List(ctx, endpoint.Filter{})
	done <- err
}

// callsInFlight names the calls of applyCall and listCall that have not returned:
// their goroutine still runs the registry's code above applyCall or listCall. Reading
// the stacks, rather than waiting for the result, tells a call that has returned from
// one Close left running. Only this module's frames count (what the standard library
// does for them is theirs), and a registry.Front's do not: a call the Front let go may
// still be on its way out of the Front's own bookkeeping when Close returns.
func callsInFlight() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	const module = "github.com/switchboard-mesh/switchboard/"
	const self = module + "registry/registrytest."
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// The goroutine's header, then two lines per frame, innermost first: the
		// function, then its file and line.
		lines := strings.Split(g, "\n")
		for i := 1; i < len(lines); i += 2 {
			name := ""
			switch {
			case strings.HasPrefix(lines[i], self+"applyCall("):
				name = "Apply"
			case strings.HasPrefix(lines[i], self+"listCall("):
				name = "List"
			default:
				continue
			}
			for j := 1; j < i; j += 2 {
				if strings.HasPrefix(lines[j], module) && !strings.HasPrefix(lines[j], module+"registry.(*Front).") {
					out = append(out, name+" (in "+strings.TrimSuffix(lines[j], "(...)")+")")
					break
				}
			}
		}
	}
	return out
}

func checkReregisterExpired(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, a, err := watchShortLived(ctx, wctx, h, r)
	if err != nil {
		return err
	}
	// Register again the moment List stops showing it: the backend may not have
	// reaped it yet, which is the case this check is about.
	time.Sleep(h.opts.TTL * 9 / 10)
	err = eventuallyEvery(ctx, h.opts.TTL+h.opts.Wait, time.Millisecond, "entry with TTL "+h.opts.TTL.String()+" disappears from List", func() (bool, error) {
		got, err := list(ctx, r, endpoint.Filter{})
		return len(got) == 0, err
	})
	if err != nil {
		return err
	}
	again := a.Clone()
	again.TTL = endpoint.Never
	if err := apply(ctx, r, registry.Register(again)); err != nil {
		return err
	}
	// Whether or not the backend had reaped it, the expired entry is gone and the
	// new registration is a new entry: Removed, then Added.
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Removed, a); err != nil {
		return fmt.Errorf("re-registering an expired entry: %w", err)
	}
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Added, a); err != nil {
		return fmt.Errorf("re-registering an expired entry: %w", err)
	}
	if err := expectQuiet(ctx, ch, 200*time.Millisecond); err != nil {
		return fmt.Errorf("re-registering an expired entry: %w", err)
	}
	return expectKeys(ctx, r, endpoint.Filter{}, again)
}

// watchSynced watches everything with wctx and consumes the initial state, which must
// be exactly want.
func watchSynced(ctx, wctx context.Context, h *harness, r registry.Registry, want ...endpoint.Endpoint) (<-chan registry.Event, error) {
	ch, err := watch(wctx, r, endpoint.Filter{})
	if err != nil {
		return nil, err
	}
	return ch, expectSynced(ctx, ch, h.opts.Wait, want...)
}

// watchShortLived watches an empty registry, registers an endpoint with the short TTL
// and waits for its Added.
func watchShortLived(ctx, wctx context.Context, h *harness, r registry.Registry) (<-chan registry.Event, endpoint.Endpoint, error) {
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.TTL = endpoint.TTL(h.opts.TTL)
	ch, err := watchSynced(ctx, wctx, h, r)
	if err != nil {
		return nil, a, err
	}
	if err := apply(ctx, r, registry.Register(a)); err != nil {
		return nil, a, err
	}
	_, err = expectEvent(ctx, ch, h.opts.Wait, registry.Added, a)
	return ch, a, err
}
