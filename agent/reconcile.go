package agent

import (
	"context"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// write is one op of a reconcile batch and the entry it is for.
type write struct {
	e  *entry
	op registry.Op
}

// reconcile decides, entry by entry, what the gate allows, and writes it in one batch.
func (l *loop) reconcile(ctx context.Context, now time.Time) {
	var batch []write
	for _, e := range l.entries {
		if w, ok := l.decide(e, now); ok {
			batch = append(batch, w)
		}
	}
	for _, e := range l.orphans {
		if now.Before(e.retryAt) {
			continue
		}
		batch = append(batch, write{e, registry.Unregister(e.m.Endpoint)})
	}
	if len(batch) > 0 {
		l.apply(ctx, batch, now)
	}
}

// decide returns the write the entry needs now, if any.
func (l *loop) decide(e *entry, now time.Time) (write, bool) {
	healthy := e.healthy()
	applyFailed := l.applyErr != nil && e.source == ""
	open, reason := Gate(GateInput{Entries: len(l.entries), NoOp: l.opts.DryRun, Held: e.m.Held, ApplyFailed: applyFailed, ChecksOK: healthy, ChecksPending: e.pending()})
	l.transition(e, reason, healthy)
	if now.Before(e.retryAt) {
		return write{}, false
	}
	switch {
	case open && e.due(now):
		return write{e, registry.Register(e.m.Endpoint)}, true
	case e.m.Held != "" && e.maybe:
		// maybe, not registered: a register whose reply was lost may have landed.
		return write{e, registry.Unregister(e.m.Endpoint)}, true
	case !healthy && e.maybe && !l.opts.KeepWhenUnhealthy:
		// Failing checks remove at once, even while a failed apply pauses the gate; the
		// pause alone only stops refreshing.
		return write{e, registry.Unregister(e.m.Endpoint)}, true
	}
	return write{}, false
}

// transition logs when the gate's answer for an entry changes. In dry-run mode the
// gate is always closed, so what it would have done is logged instead.
func (l *loop) transition(e *entry, reason string, healthy bool) {
	key := e.m.Endpoint.Key().String()
	if l.opts.DryRun {
		would, _ := Gate(GateInput{Entries: len(l.entries), Held: e.m.Held, ApplyFailed: l.applyErr != nil && e.source == "", ChecksOK: healthy})
		if e.reason != reason || would != e.would {
			if would {
				l.log.Info("dry-run: would register", "entry", key)
			} else {
				l.log.Info("dry-run: would not register", "entry", key)
			}
		}
		e.would = would
	}
	if reason == e.reason {
		return
	}
	prev := e.reason
	e.reason, e.since = reason, time.Now()
	switch reason {
	case "":
		l.log.Info("publish gate open", "entry", key)
	case ReasonNoOp:
	default:
		l.log.Info("publish gate closed", "entry", key, "reason", reason, "was", prev)
	}
}

// apply writes a batch and records the outcome on each entry.
func (l *loop) apply(ctx context.Context, batch []write, now time.Time) {
	ops := make([]registry.Op, len(batch))
	for i, w := range batch {
		ops[i] = w.op
		if w.op.Kind == registry.OpRegister {
			w.e.maybe = true // from now on the registry may hold it, whatever the outcome
			w.e.sent = w.op.Endpoint
		}
	}
	wctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
	err := l.publish(wctx, ops, "reconcile") // tracing.go
	cancel()
	if ctx.Err() != nil && err != nil {
		return // shutting down: the final removal covers these entries
	}
	msg := errText(err) // once for the batch, not once an entry
	for _, w := range batch {
		l.opts.Metrics.write(w.op.Kind.String(), 1, err)
		if err != nil {
			l.failed(w, msg, now)
			continue
		}
		l.succeeded(w, now)
	}
}

func (l *loop) succeeded(w write, now time.Time) {
	e := w.e
	e.failures, e.retryAt, e.writeErr = 0, time.Time{}, ""
	key := e.m.Endpoint.Key()
	if w.op.Kind == registry.OpUnregister {
		wasRegistered := e.registered
		e.registered, e.maybe, e.refreshAt = false, false, time.Time{}
		switch {
		case l.orphans[key] == e:
			delete(l.orphans, key)
			l.log.Info("unregistered: left the manifest", "entry", key.String(), "source", e.source)
		case wasRegistered && e.m.Held != "":
			l.log.Info("unregistered: held by its source", "entry", key.String(), "source", e.source, "reason", e.m.Held)
		case wasRegistered:
			l.log.Info("unregistered: health checks failing", "entry", key.String())
		}
		return
	}
	first := !e.registered || !endpoint.Equal(e.written, e.m.Endpoint)
	e.registered, e.written = true, e.m.Endpoint.Clone()
	e.refreshAt = time.Time{}
	if d := refreshInterval(e.m.Endpoint.TTL); d > 0 {
		e.refreshAt = now.Add(d)
	} else if l.opts.Resync > 0 {
		e.refreshAt = now.Add(l.opts.Resync)
	}
	if first {
		l.log.Info("registered", "entry", key.String(), "instance", key.InstanceID(), "ttl", e.m.Endpoint.TTL.String())
	}
}

// failed records a failed write; msg is the batch's error.
func (l *loop) failed(w write, msg string, now time.Time) {
	e := w.e
	wait := l.backoff(e.failures)
	// A registration must be retried before its TTL would run out, or it expires.
	if d := refreshInterval(e.m.Endpoint.TTL); d > 0 {
		wait = min(wait, d)
	}
	e.failures++
	e.retryAt, e.writeErr = now.Add(wait), msg
	l.log.Warn("registry write failed", "op", w.op.Kind.String(), "entry", e.m.Endpoint.Key().String(), "err", msg, "retry_in", wait)
}
