package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Driver is the storage half of a registry: what a backend implements. A backend is
// used through a Front, as a database/sql driver is through *sql.DB; the Front holds
// the rules every backend shares, so a Driver may rely on them:
//
//   - Apply gets a batch that is validated (Validate) and netted out (Coalesce), never
//     an empty one; List and Watch get a filter that is validated and normalised.
//   - The context of every call also ends when the registry closes; the Front turns
//     what that cuts short into ErrClosed, and a call its caller gave up on into the
//     caller's context error.
//   - Close is called once, after every call and watch it was handed has returned
//     (a watch has returned when its channel is closed).
//   - List's answer is filtered and sorted by the Front (Arrange): a driver returns
//     the live entries it read for the filter, in any order, and may return more
//     than the filter matches.
//
// What is left to a Driver is the storage itself: writing a batch, reading back
// what a filter selects without expired entries, releasing its resources.
type Driver interface {
	Registry
}

// WatchDriver is implemented by drivers with a change feed. Watch sends every
// matching endpoint, Synced, then each change; the Front keeps what reaches the
// caller consistent (see Front.Watch), so a change may be sent as it is read,
// without knowing what the caller holds. A driver that must read its whole state
// again (a reconnect, a compaction, a lost feed) sends Reread, the state as Added
// events, and Synced: the Front sends the caller only the differences. The channel
// must be closed once ctx ends.
type WatchDriver interface {
	Watcher
}

// CachedLister is implemented by drivers that can answer some lists at once from
// memory (the memory backend always, the registrar client from its cache). The Front
// asks it first, without the context it would tie to Close for a call that may block:
// that costs allocations a cached read must not. Its answer is final, filtered and
// sorted (a cache keeps its answers ready; one built afresh is put right by Arrange).
type CachedLister interface {
	// ListCached returns the matching endpoints, or false if the answer is not at
	// hand and List must be called.
	ListCached(f endpoint.Filter) ([]endpoint.Endpoint, bool)
}

// Front is a registry as callers use it: one Driver behind the rules of the registry
// contract. Open returns one, and so does every backend's constructor. It validates
// input once, refuses calls after Close, ends and waits for calls in flight on
// Close, maps cancellation, keeps every watch consistent, and counts every call
// (Collect). It is safe for concurrent use.
type Front struct {
	name string
	d    Driver
	wd   WatchDriver  // nil: no change feed
	cl   CachedLister // nil: every List goes to the driver
	m    *metrics

	// root ends when Close begins; every call's context is tied to it.
	root context.Context
	stop context.CancelCauseFunc

	// state counts the admitted calls and running watches in its low bits; its
	// closing bit is set when Close begins. One atomic add admits a call and one
	// ends it, so a cached read stays cheap.
	state atomic.Int64
	// drained is closed once closing is set and nothing admitted is left.
	drained   chan struct{}
	drainOnce sync.Once

	closeOnce sync.Once
	closeErr  error
}

var (
	_ Registry = (*Front)(nil)
	_ Watcher  = (*Front)(nil)
)

// NewFront puts d behind the shared rules; name (the backend's) labels its metrics.
// Backends call it from their constructors; Open calls it for a backend opened by
// name.
func NewFront(name string, d Driver) *Front {
	if f, ok := d.(*Front); ok {
		return f
	}
	f := &Front{name: name, d: d, m: newMetrics(name, d), drained: make(chan struct{})}
	f.wd, _ = d.(WatchDriver)
	f.cl, _ = d.(CachedLister)
	f.root, f.stop = context.WithCancelCause(context.Background())
	return f
}

// Wrap returns a constructor's result as a Front: a driver behind the shared rules,
// or the error that kept it from opening. Backends write
// return registry.Wrap("etcd")(newDriver(ctx, o)).
func Wrap(name string) func(Driver, error) (*Front, error) {
	return func(d Driver, err error) (*Front, error) {
		if err != nil {
			return nil, err
		}
		return NewFront(name, d), nil
	}
}

// Name is the backend's name.
func (f *Front) Name() string { return f.name }

// Driver returns the backend behind the front, for what only that backend offers (as
// database/sql's Conn.Raw does). Calls made on it directly skip the shared rules.
func (f *Front) Driver() Driver { return f.d }

// CanWatch reports whether the backend has a change feed.
func (f *Front) CanWatch() bool { return f.wd != nil }

// closing marks state once Close has begun.
const closing = 1 << 62

// enter admits one call, or fails with ErrClosed. An admitted call must end with
// done (through leave, for a call; for a watch, once it has returned).
func (f *Front) enter() error {
	if f.state.Add(1)&closing != 0 {
		f.done()
		return ErrClosed
	}
	return nil
}

// done ends an admitted call. The last to end after Close began lets Close go on.
func (f *Front) done() {
	if f.state.Add(-1) == closing {
		f.drainOnce.Do(func() { close(f.drained) })
	}
}

// leave counts a call that began at start, and ends it: Close may return from here
// on, so nothing of the call may follow.
func (f *Front) leave(op int, start time.Time, err *error) {
	f.m.observe(op, start, err)
	f.done()
}

// bind returns a context that also ends when Close begins, with ErrClosed as its
// cause.
func (f *Front) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(f.root, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// result maps a driver's error: a call Close cut short fails with ErrClosed, one whose
// caller gave up matches the caller's context error; either keeps the driver's words.
func (f *Front) result(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case f.root.Err() != nil && !errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// Apply validates the whole batch, nets it out and hands it to the backend.
func (f *Front) Apply(ctx context.Context, ops []Op) (err error) {
	start := time.Now()
	if err := f.enter(); err != nil {
		f.m.observe(opApply, start, &err)
		return err
	}
	defer f.leave(opApply, start, &err)
	if err := Validate(ops); err != nil {
		return err
	}
	if err := f.checkHolds(ops); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	cctx, cancel := f.bind(ctx)
	defer cancel()
	return f.result(ctx, f.d.Apply(cctx, Coalesce(ops)))
}

// List validates the filter (a filter that could never match is a typo, reported as
// endpoint.ErrInvalid rather than answered with nothing), reads, and filters and
// sorts what the driver read (Arrange).
func (f *Front) List(ctx context.Context, filter endpoint.Filter) ([]endpoint.Endpoint, error) {
	if err := f.enter(); err != nil {
		f.m.count(opList, err)
		return nil, err
	}
	filter, err := checkFilter(ctx, filter)
	if err == nil && f.cl != nil {
		// A cached read is counted but not timed: the clock would cost it more
		// than the read, and the histogram is about the backend.
		if eps, ok := f.cl.ListCached(filter); ok {
			f.m.count(opList, nil)
			f.done()
			return eps, nil
		}
	}
	if err != nil {
		f.m.count(opList, err)
		f.done()
		return nil, err
	}
	return f.list(ctx, filter)
}

// list asks the driver, for an admitted call.
func (f *Front) list(ctx context.Context, filter endpoint.Filter) (eps []endpoint.Endpoint, err error) {
	defer f.leave(opList, time.Now(), &err)
	cctx, cancel := f.bind(ctx)
	defer cancel()
	eps, err = f.d.List(cctx, filter)
	if err != nil {
		return nil, f.result(ctx, err)
	}
	return Arrange(eps, filter), nil
}

// checkFilter validates a filter and returns it normalised, unless ctx has ended.
func checkFilter(ctx context.Context, f endpoint.Filter) (endpoint.Filter, error) {
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("filter: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return f, err
	}
	if f.Address != "" || f.Cluster == "*" || f.Protocol == "*" || f.Service == "*" {
		f = f.Normalize() // most filters are normal already, and Validate normalised a copy
	}
	return f, nil
}

// Close ends every call in flight and every watch, waits for them, and releases the
// backend. It is idempotent: every call waits for the first to finish, and only the
// first reports the backend's error.
func (f *Front) Close() error {
	first := false
	f.closeOnce.Do(func() {
		first = true
		// From here on enter refuses; what it admitted before is counted.
		if f.state.Add(closing) == closing {
			f.drainOnce.Do(func() { close(f.drained) })
		}
		f.stop(ErrClosed)
		<-f.drained
		f.closeErr = f.d.Close()
	})
	if !first {
		return nil
	}
	return f.closeErr
}
