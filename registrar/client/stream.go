package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// run keeps a watch stream open until ctx ends, reconnecting with exponential
// backoff and full jitter; a stream that got as far as a complete initial phase
// resets the backoff.
func (c *driver) run(ctx context.Context) {
	b := backoff.Backoff{Min: c.opts.BackoffMin, Max: c.opts.BackoffMax}
	for {
		caughtUp, err := c.streamOnce(ctx)
		c.cache.disconnected()
		if ctx.Err() != nil {
			return
		}
		if caughtUp {
			b.Reset()
		}
		wait := b.Next()
		c.reconnects.Add(1)
		c.lost.set(err, time.Now())
		c.log.Info("registrar watch stream lost; reconnecting", "err", err, "in", wait)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// streamOnce runs one watch stream to its end. It reports whether the stream
// completed its initial phase.
func (c *driver) streamOnce(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	recv, stop, err := c.openWatch(sctx)
	defer func() {
		cancel()
		stop()
	}()
	if err != nil {
		return false, c.callError("watch", err)
	}
	var st streamState
	defer c.held.closed()
	for first := true; ; first = false {
		ev, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			return st.caughtUp, c.callError("watch", err)
		}
		if first {
			// The registrar counts the session's stream before it sends anything:
			// from here on, it holds what this client registers (held.go).
			c.held.opened()
			c.rehold(sctx)
		}
		if err := c.apply(ctx, ev, &st); err != nil {
			return st.caughtUp, err
		}
	}
}

// streamState is what one watch stream has received so far.
type streamState struct {
	staged   map[endpoint.Key]endpoint.Endpoint // a full snapshot being received
	caughtUp bool                               // the initial phase is complete
}

// apply applies one event of the stream. A BATCH's events are applied in order,
// each exactly as if it had come in a message of its own.
func (c *driver) apply(ctx context.Context, ev *registrarv1.EndpointEvent, st *streamState) error {
	switch ev.GetType() {
	case registrarv1.EndpointEvent_BATCH:
		for _, e := range ev.GetEvents() {
			if err := c.apply(ctx, e, st); err != nil {
				return err
			}
		}
	case registrarv1.EndpointEvent_FULL_SNAPSHOT:
		if err := inflate(ev); err != nil {
			return fmt.Errorf("FULL_SNAPSHOT: %w", err)
		}
		if st.staged == nil {
			st.staged = map[endpoint.Key]endpoint.Endpoint{}
		}
		c.stage(st.staged, ev)
	case registrarv1.EndpointEvent_PROGRESS:
		v, err := token.Parse(ev.GetVersion())
		if err != nil {
			return fmt.Errorf("PROGRESS: %w", err)
		}
		c.cache.progressed(v, persistedOf(ev, v))
	case registrarv1.EndpointEvent_SNAPSHOT_COMPLETE:
		return c.complete(ctx, ev, st)
	default:
		if ev.GetTraceparent() != "" && tracing.Enabled() {
			return c.tracedChange(ev) // tracing.go
		}
		return c.change(ev)
	}
	return nil
}

// complete applies a SNAPSHOT_COMPLETE: the end of a resumed replay, or the
// staged snapshot replacing the cache.
func (c *driver) complete(ctx context.Context, ev *registrarv1.EndpointEvent, st *streamState) error {
	v, err := token.Parse(ev.GetVersion())
	if err != nil {
		return fmt.Errorf("SNAPSHOT_COMPLETE: %w", err)
	}
	persisted := persistedOf(ev, v)
	if ev.GetResumed() {
		if lost := c.cache.resumed(v, persisted, ev.GetScopeId()); len(lost) > 0 {
			c.resend(ctx, lost)
		}
	} else {
		if st.staged == nil {
			st.staged = map[endpoint.Key]endpoint.Endpoint{}
		}
		if lost := c.cache.replace(st.staged, v, persisted, ev.GetScopeId()); len(lost) > 0 {
			c.resend(ctx, lost)
		}
		st.staged = nil
	}
	st.caughtUp = true
	return nil
}

// openWatch opens the watch stream: WatchEndpoints, or for a scoped client
// WatchEndpointsScoped with a sender of the client's changes of its set of
// services. stop waits for that sender once ctx has ended.
func (c *driver) openWatch(ctx context.Context) (recv func() (*registrarv1.EndpointEvent, error), stop func(), err error) {
	// Batches: a registrar with many watchers that falls behind catches up in
	// fewer messages; one that does not know the field sends events one by one.
	// Compressed snapshots: a sixth of the bytes (inflate.go).
	req := &registrarv1.WatchEndpointsRequest{ClusterName: c.opts.Cluster, NodeName: c.opts.Node, LastVersion: c.cache.token(), AcceptBatches: true,
		AcceptCompressed: true, Session: c.held.session}
	nothing := func() {}
	if !c.opts.Scoped {
		st, err := c.api.WatchEndpoints(ctx, req)
		if err != nil {
			return nil, nothing, err
		}
		return st.Recv, nothing, nil
	}
	// Resume with the set the cache holds, the one the token belongs to; a new
	// cache starts with the set wanted now. A changed set follows at once.
	set, id, ok := c.cache.coveredScope()
	if !ok {
		req.LastVersion = ""
		c.cache.mu.Lock()
		set = c.interest.set()
		id = c.cache.newScope(set)
		c.cache.mu.Unlock()
	}
	req.Services, req.AllServices, req.ScopeId = names(set), set == nil, id
	st, err := c.api.WatchEndpointsScoped(ctx)
	if err != nil {
		return nil, nothing, err
	}
	// io.EOF: the server already ended the stream (refused it); the status that
	// says why is what Recv returns, so the stream's reader gets it.
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, nothing, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.sendScopes(ctx, st.Send, set)
	}()
	c.kickScope()
	return st.Recv, func() { <-done }, nil
}

// sendScopes sends the client's set of services whenever it changes, until ctx
// ends or a send fails (the stream is then broken, and Recv says why).
func (c *driver) sendScopes(ctx context.Context, send func(*registrarv1.WatchEndpointsRequest) error, last map[string]struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.scopeKick:
		}
		c.cache.mu.Lock()
		want := c.interest.set()
		if sameSet(want, last) {
			c.cache.mu.Unlock()
			continue
		}
		id := c.cache.newScope(want)
		c.cache.mu.Unlock()
		if err := send(&registrarv1.WatchEndpointsRequest{Services: names(want), AllServices: want == nil, ScopeId: id}); err != nil {
			return
		}
		last = want
	}
}

func (c *driver) stage(staged map[endpoint.Key]endpoint.Endpoint, ev *registrarv1.EndpointEvent) {
	add := func(p *registryv1.Endpoint) {
		e, err := endpoint.FromProtoUnchecked(p)
		if err != nil {
			c.log.Warn("skipping a malformed endpoint in a snapshot", "err", err)
			return
		}
		staged[e.Key()] = e
	}
	if p := ev.GetEndpoint(); p != nil {
		add(p)
	}
	for _, p := range ev.GetEndpoints() {
		add(p)
	}
}

func (c *driver) change(ev *registrarv1.EndpointEvent) error {
	v, err := token.Parse(ev.GetVersion())
	if err != nil {
		return fmt.Errorf("%s event: %w", ev.GetType(), err)
	}
	e, err := endpoint.FromProtoUnchecked(ev.GetEndpoint())
	if err != nil {
		return fmt.Errorf("%s event: %w", ev.GetType(), err)
	}
	var t registry.EventType
	switch ev.GetType() {
	case registrarv1.EndpointEvent_ENDPOINT_ADDED:
		t = registry.Added
	case registrarv1.EndpointEvent_ENDPOINT_UPDATED:
		t = registry.Updated
	case registrarv1.EndpointEvent_ENDPOINT_REMOVED:
		t = registry.Removed
	default:
		// A newer registrar may send types this client does not know; the version
		// still moves on.
		c.log.Debug("ignoring an unknown event type", "type", ev.GetType())
		return nil
	}
	c.cache.change(t, e, v, persistedOf(ev, v))
	return nil
}

// persistedOf reads an event's persisted frontier; a registrar that sends none
// confirms nothing.
func persistedOf(ev *registrarv1.EndpointEvent, v token.Version) token.Version {
	p, err := token.Parse(ev.GetPersisted())
	if err != nil || p.Epoch != v.Epoch {
		return token.Version{Epoch: v.Epoch}
	}
	return p
}

// resend writes again, in the background, what the new replica lost; it retries
// until each write is accepted, superseded by a newer write of the agent, or the
// client closes. Each attempt holds the client's write lock, so that it is ordered
// with Apply: a re-send never lands after a newer write to the same key.
func (c *driver) resend(ctx context.Context, refs []ownRef) {
	c.log.Info("re-sending writes the registrar does not have", "count", len(refs))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b := backoff.Backoff{Min: c.opts.BackoffMin, Max: c.opts.BackoffMax}
		for ctx.Err() == nil {
			left, err := c.resendOnce(ctx, refs)
			if err == nil && len(left) == 0 {
				return
			}
			refs = left
			c.log.Warn("re-sending writes failed; retrying", "err", err)
			b.Wait(ctx)
		}
	}()
}

// resendOnce makes one attempt, and returns the writes still to re-send.
func (c *driver) resendOnce(ctx context.Context, refs []ownRef) ([]ownRef, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	groups := requests(c.cache.stillLost(refs), func(r ownRef) registry.Op { return r.w.op })
	for i, group := range groups {
		ops := make([]registry.Op, len(group))
		for j, r := range group {
			ops[j] = r.w.op
		}
		sctx, end := traceResend(ctx, group) // tracing.go
		gen, _ := c.held.current()
		v, isHeld, err := c.send(sctx, ops)
		end(err)
		if err != nil {
			return slices.Concat(groups[i:]...), err
		}
		c.held.wrote(ops, isHeld, gen)
		c.cache.resent(group, v)
	}
	return nil, nil
}

// requests groups writes into the requests the registrar takes: registrations,
// then removals, each in chunks of at most maxWriteChunk. op says what an item
// writes.
func requests[T any](items []T, op func(T) registry.Op) [][]T {
	var regs, unregs []T
	for _, it := range items {
		if op(it).Kind == registry.OpRegister {
			regs = append(regs, it)
		} else {
			unregs = append(unregs, it)
		}
	}
	var out [][]T
	for _, g := range [][]T{regs, unregs} {
		for len(g) > 0 {
			n := min(len(g), maxWriteChunk)
			out = append(out, g[:n])
			g = g[n:]
		}
	}
	return out
}

// position is where the cache stands with the stream: the version it applied
// last, whether it has had a first snapshot, and whether it is current.
type position struct {
	at       token.Version // the last version applied from the stream
	ready    bool
	readyCh  chan struct{}
	current  bool      // the stream is up and its initial phase complete
	lastGood time.Time // when the cache was last known current

	// currentSince is when current last changed (the cache's start before it
	// first does): a stream's (re)connection or its end, not every snapshot a
	// scope change brings on the same stream (inspect.go).
	currentSince time.Time
}

// markCurrent records that a snapshot or a resumed replay has completed: the
// cache is current from now on.
func (c *cache) markCurrent() {
	now := c.now()
	if !c.current {
		c.currentSince = now
	}
	c.current = true
	c.lastGood = now
}

// disconnected records that the stream is down: the cache now ages.
func (c *cache) disconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current {
		c.current = false
		c.lastGood = c.now()
		c.currentSince = c.lastGood
	}
}

// age is how long ago the cache was last known current; 0 while it is.
func (c *cache) age() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current {
		return 0
	}
	return c.now().Sub(c.lastGood)
}

func (c *cache) token() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready {
		return ""
	}
	return c.at.String()
}
