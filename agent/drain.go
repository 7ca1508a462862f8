package agent

import (
	"context"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Locality and draining (docs/agent.md, "Locality and draining").

// localize gives the entry the node's region and zone where it names none. An
// entry placed in another region takes no zone from the node: a zone lies in one
// region, and the node's would place the entry in two.
func (l *loop) localize(me manifest.Entry) manifest.Entry {
	ep := &me.Endpoint
	if ep.Zone == "" && (ep.Region == "" || ep.Region == l.opts.Region) {
		ep.Zone = l.opts.Zone
	}
	if ep.Region == "" {
		ep.Region = l.opts.Region
	}
	return me
}

// Drain outcomes, the values of switchboard_agent_drains_total's outcome label.
const (
	drainCompleted = "completed" // the grace period ran out
	drainSkipped   = "skipped"   // SkipDrain cut it short
	drainFailed    = "failed"    // the Draining write failed: removed at once
)

// drain runs before the removal on shutdown: it publishes the entries clients route
// to again as Draining, through the same publisher as every write, so that xDS and
// DNS clients stop sending them new work, then waits DrainGrace for the work they
// have to finish. The removal follows (shutdown), so clients never see an entry
// vanish while they still send it requests. Nothing to drain, or no grace, means no
// wait. ctx is already done: the write has a deadline of its own.
func (l *loop) drain(ctx context.Context) {
	grace := l.opts.DrainGrace
	if _, noop := l.pub.(NoopPublisher); noop || grace <= 0 {
		return // no registry, no client to tell
	}
	ops := l.drainable()
	if len(ops) == 0 {
		return
	}
	l.setNotReady("draining: " + grace.String() + " before the entries are removed")
	l.opts.Metrics.setDraining(true)
	defer l.opts.Metrics.setDraining(false)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.ShutdownTimeout)
	err := l.publish(wctx, ops, "drain") // tracing.go
	cancel()
	l.opts.Metrics.write("drain", len(ops), err)
	if err != nil {
		// Clients were not told: waiting would only delay the removal.
		l.log.Warn("draining failed: removing the entries at once", "entries", len(ops), "err", err)
		l.opts.Metrics.drained(drainFailed)
		return
	}
	l.log.Info("draining: entries published as draining, removing them after the grace period",
		"entries", len(ops), "grace", grace.String())
	outcome := l.waitGrace(grace)
	l.opts.Metrics.drained(outcome)
	if outcome == drainSkipped {
		l.log.Info("draining cut short by a second signal: removing the entries now")
	}
}

// drainable is a Draining register for each entry that clients may be routing to:
// registered, healthy, and not left behind on shutdown (KeepOnShutdown: pods stay
// routable through an agent restart, so they are not drained either).
func (l *loop) drainable() []registry.Op {
	var ops []registry.Op
	for _, e := range l.entries {
		if e.registered && !e.m.KeepOnShutdown && e.written.Health.Routable() {
			d := e.written.Clone()
			d.Health = endpoint.Draining
			ops = append(ops, registry.Register(d))
		}
	}
	return ops
}

// waitGrace waits for the grace period to run out, or for SkipDrain.
func (l *loop) waitGrace(grace time.Duration) string {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-t.C:
		return drainCompleted
	case <-l.opts.SkipDrain:
		return drainSkipped
	}
}

// setNotReady makes /readyz answer 503 with why: the loop no longer publishes its
// status once it is shutting down.
func (l *loop) setNotReady(why string) {
	l.mu.Lock()
	l.notReady = why
	l.mu.Unlock()
	l.changes.Bump()
}
