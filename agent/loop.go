package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// result is one check run, reported by a check goroutine to the loop.
type result struct {
	e   *entry
	i   int
	err error
}

// loop is the state Run owns.
type loop struct {
	*Agent
	// fromManifest and fromSources are the entries each source asks for; entries is
	// what they add up to.
	fromManifest []manifest.Entry
	fromSources  map[string][]manifest.Entry
	// shadowed remembers keys already logged as named by two sources.
	shadowed  map[endpoint.Key]bool
	entries   []*entry
	byKey     map[endpoint.Key]*entry
	orphans   map[endpoint.Key]*entry // left the manifest, still to be removed
	applyErr  error
	results   chan result
	checksCtx context.Context
	checks    sync.WaitGroup
	// spare is the statuses published the step before the last (publishStatus).
	spare []EntryStatus
}

// Run runs checks and publishes until ctx ends, then removes what it registered and
// returns. The error reports only a failure of that final removal.
func (a *Agent) Run(ctx context.Context) error {
	checksCtx, stopChecks := context.WithCancel(ctx)
	l := &loop{Agent: a, byKey: map[endpoint.Key]*entry{}, orphans: map[endpoint.Key]*entry{},
		fromSources: map[string][]manifest.Entry{}, shadowed: map[endpoint.Key]bool{},
		results: make(chan result), checksCtx: checksCtx}
	defer func() {
		stopChecks()
		l.checks.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop := func() error {
		// Not ready from the signal on: a probe under way may take its timeout (and
		// an exec check's WaitDelay) to end.
		l.setNotReady("shutting down")
		stopChecks()
		l.checks.Wait()
		l.drain(ctx)
		return l.shutdown(ctx)
	}
	for {
		if ctx.Err() != nil {
			// Checked before each pass, the first included: a write made now, through
			// a publisher that ignores ctx, would only be drained and removed again.
			return stop()
		}
		if r, sources := a.takePending(); r != nil || sources != nil {
			l.reload(r, sources)
		}
		l.reconcile(ctx, time.Now())
		l.publishStatus()
		timer.Reset(l.nextWake(time.Now()))
		select {
		case <-ctx.Done():
			return stop()
		case r := <-l.results:
			l.observe(r)
		case <-a.wake:
		case <-timer.C:
		}
	}
}

// reload applies a new manifest (or records a failed load) and new source entries.
func (l *loop) reload(r *reload, sources map[string][]manifest.Entry) {
	if r != nil && r.err != nil {
		l.applyErr = r.err
		l.log.Error("manifest apply failed: publishing its entries paused until a good manifest loads", "err", r.err)
		l.opts.Metrics.applyFailed(true)
	} else if r != nil {
		if l.applyErr != nil {
			l.log.Info("manifest applied: publishing resumes")
		}
		l.applyErr = nil
		l.opts.Metrics.applyFailed(false)
		l.fromManifest = r.m.Entries
	}
	maps.Copy(l.fromSources, sources)
	l.setEntries(l.combined())
}

// sourced is an entry and the source that asks for it ("" is the manifest).
type sourced struct {
	m      manifest.Entry
	source string
}

// combined lists the manifest's entries, then each source's in name order, leaving
// out a key named before.
func (l *loop) combined() []sourced {
	all := make([]sourced, 0, len(l.fromManifest))
	seen := make(map[endpoint.Key]bool, len(l.fromManifest))
	add := func(source string, es []manifest.Entry) {
		for _, me := range es {
			k := me.Endpoint.Key()
			if seen[k] {
				if !l.shadowed[k] {
					l.shadowed[k] = true
					l.log.Warn("entry named twice: the first source's is published", "entry", k.String(), "source", source)
				}
				continue
			}
			seen[k] = true
			all = append(all, sourced{l.localize(me), source})
		}
	}
	add("", l.fromManifest)
	for _, name := range slices.Sorted(maps.Keys(l.fromSources)) {
		add(name, l.fromSources[name])
	}
	return all
}

// setEntries makes next the entries: those that left are removed from the registry,
// new ones start their checks.
func (l *loop) setEntries(all []sourced) {
	next := make([]*entry, 0, len(all))
	byKey := make(map[endpoint.Key]*entry, len(all))
	for _, se := range all {
		k := se.m.Endpoint.Key()
		e := l.byKey[k]
		switch {
		case e != nil && reflect.DeepEqual(e.m.Checks, se.m.Checks):
			e.m = se.m // same checks: keep their state; a changed endpoint is re-published
		default:
			if e != nil {
				e.stop()
			}
			// A key that comes back before its removal was written keeps what the
			// registry may hold of it, so that the removal still happens if needed.
			prev := cmp.Or(e, l.orphans[k])
			ne := newEntry(se.m)
			if prev != nil {
				ne.registered, ne.maybe, ne.written, ne.sent = prev.registered, prev.maybe, prev.written, prev.sent
			}
			e = ne
			l.startChecks(e)
		}
		e.source = se.source
		next = append(next, e)
		byKey[k] = e
		delete(l.orphans, k)
	}
	for k, e := range l.byKey {
		if byKey[k] == nil {
			e.stop()
			l.opts.Metrics.forget(e.m.Endpoint)
			if e.maybe {
				e.retryAt, e.failures = time.Time{}, 0
				l.orphans[k] = e
			}
		}
	}
	l.entries, l.byKey = next, byKey
	l.opts.Metrics.setEntries(len(next))
}

func (l *loop) startChecks(e *entry) {
	ctx, cancel := context.WithCancel(l.checksCtx)
	e.stop = cancel
	for i, spec := range e.m.Checks {
		c, err := check.New(spec)
		if err != nil {
			// The manifest validated the spec; if it still fails the check counts as
			// failing, and its status says why.
			e.setCheck(i, err.Error())
			continue
		}
		l.checks.Add(1)
		go func() {
			defer l.checks.Done()
			runCheck(ctx, e, i, spec, c, l.results)
		}()
	}
}

// runCheck probes at once, then every interval, and reports each result.
func runCheck(ctx context.Context, e *entry, i int, spec check.Spec, c check.Checker, out chan<- result) {
	ticker := time.NewTicker(spec.Interval)
	defer ticker.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, spec.Timeout)
		err := c.Check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- result{e: e, i: i, err: err}:
		case <-ctx.Done():
			return
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
	}
}

// observe feeds one check result to its tracker; results of replaced entries are
// dropped.
func (l *loop) observe(r result) {
	if l.byKey[r.e.m.Endpoint.Key()] != r.e {
		return
	}
	spec := r.e.m.Checks[r.i]
	r.e.seen[r.i] = true
	l.opts.Metrics.checkResult(spec.Kind, r.err == nil)
	msg := errText(r.err) // once: the status's LastError and the tracker's output share it
	changed := r.e.trackers[r.i].Record(time.Now(), r.err == nil, msg)
	r.e.setCheck(r.i, msg)
	if !changed {
		return
	}
	key := r.e.m.Endpoint.Key().String()
	if r.err == nil {
		l.log.Info("check passing", "entry", key, "check", spec.String())
	} else {
		l.log.Warn("check failing", "entry", key, "check", spec.String(), "err", r.err)
	}
}

// backoff is the wait before an entry's retry after n failed writes (each entry
// counts its own).
func (l *loop) backoff(n int) time.Duration {
	return backoff.Backoff{Min: l.opts.RetryMin, Max: l.opts.RetryMax}.Delay(n)
}

// nextWake is how long until a refresh or retry is due.
func (l *loop) nextWake(now time.Time) time.Duration {
	next := time.Hour
	consider := func(t time.Time) {
		if !t.IsZero() {
			next = min(next, max(t.Sub(now), 0))
		}
	}
	for _, e := range l.entries {
		consider(e.refreshAt)
		consider(e.retryAt)
	}
	for _, e := range l.orphans {
		consider(e.retryAt)
	}
	return next
}

// publishStatus publishes every entry's status, after every step. Status copies
// the published statuses under the agent's lock and nobody else reads them, so the
// ones replaced are written over the next time: two arrays take turns, and a step
// allocates nothing (BenchmarkPublishStatus).
func (l *loop) publishStatus() {
	st := l.spare[:0]
	for _, e := range l.entries {
		st = append(st, e.status())
	}
	clear(st[len(st):cap(st)]) // fewer entries than last time: let the others go
	if m := l.opts.Metrics; m != nil {
		for i, e := range l.entries {
			m.entryState(e.m.Endpoint, st[i].Healthy, e.registered)
		}
	}
	notReady := l.waitingFor()
	l.mu.Lock()
	l.spare, l.statuses, l.notReady = l.statuses, st, notReady
	l.mu.Unlock()
	l.changes.Bump() // every step may change what the page shows
}

// waitingFor says what keeps the agent from being ready ("" when nothing does): a
// manifest that did not apply, checks without a first result, entries whose last
// registry write failed.
func (l *loop) waitingFor() string {
	if l.applyErr != nil {
		return "manifest: " + l.applyErr.Error()
	}
	unseen, failing := 0, 0
	for _, e := range l.entries {
		for _, seen := range e.seen {
			if !seen {
				unseen++
			}
		}
		if e.failures > 0 {
			failing++
		}
	}
	switch {
	case unseen > 0:
		return fmt.Sprintf("checks: %d have no result yet", unseen)
	case failing > 0:
		return fmt.Sprintf("registry: the last write of %d entries failed", failing)
	}
	return ""
}

// shutdown removes every entry this agent may have registered, with a fresh deadline:
// ctx is already done.
func (l *loop) shutdown(ctx context.Context) error {
	var ops []registry.Op
	for _, e := range l.entries {
		if e.maybe && !e.m.KeepOnShutdown {
			ops = append(ops, registry.Unregister(e.m.Endpoint))
		}
	}
	for _, e := range l.orphans {
		ops = append(ops, registry.Unregister(e.m.Endpoint))
	}
	if len(ops) == 0 {
		return nil
	}
	l.setNotReady("shutting down: removing the entries")
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.ShutdownTimeout)
	defer cancel()
	err := l.publish(wctx, ops, "shutdown") // tracing.go
	l.opts.Metrics.write("unregister", len(ops), err)
	if err != nil {
		return fmt.Errorf("unregister %d entries on shutdown: %w", len(ops), err)
	}
	l.log.Info("unregistered on shutdown", "entries", len(ops))
	return nil
}
