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
// entry that names a zone takes no region from the node, and one placed in another
// region takes no zone from it: a zone lies in one region, and the node's need not
// be the entry's zone's (zone us-east-1a on an eu-west node) nor the node's zone
// the entry's region's.
func (l *loop) localize(me manifest.Entry) manifest.Entry {
	ep := &me.Endpoint
	switch {
	case ep.Region == "" && ep.Zone == "":
		ep.Region, ep.Zone = l.opts.Region, l.opts.Zone
	case ep.Zone == "" && ep.Region == l.opts.Region:
		ep.Zone = l.opts.Zone
	}
	return me
}

// Drain outcomes, the values of switchboard_agent_drains_total's outcome label.
const (
	drainCompleted = "completed" // the grace period ran out
	drainSkipped   = "skipped"   // SkipDrain cut it short
	drainFailed    = "failed"    // the Draining write failed: removed at once
)

// drain runs before the removal on shutdown: it publishes the entries clients may
// route to again as Draining, through the same publisher as every write, so that
// xDS and DNS clients stop sending them new work, then waits DrainGrace for the work
// they have to finish. The removal follows (shutdown), so clients never see an entry
// vanish while they still send it requests. Nothing to drain, or no grace, means no
// wait. ctx is already done: the write has a deadline of its own.
func (l *loop) drain(ctx context.Context) {
	grace := l.opts.DrainGrace
	if _, noop := l.pub.(NoopPublisher); noop || grace <= 0 {
		return // no registry, no client to tell
	}
	known, unsure := l.drainable()
	ops := append(known, unsure...)
	if len(ops) == 0 {
		return
	}
	l.setNotReady("draining: " + grace.String() + " before the entries are removed")
	l.opts.Metrics.setDraining(true)
	defer l.opts.Metrics.setDraining(false)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.ShutdownTimeout)
	err := l.publish(wctx, ops, "drain") // tracing.go
	l.opts.Metrics.write("drain", len(ops), err)
	if err != nil && len(unsure) > 0 && len(known) > 0 && wctx.Err() == nil {
		// An entry whose register never landed may be one the registry refuses: it
		// must not keep the registered ones from draining. Within the same deadline.
		l.log.Warn("draining: the write failed, trying again with the registered entries only",
			"entries", len(known), "left_out", len(unsure), "err", err)
		ops = known
		err = l.publish(wctx, ops, "drain")
		l.opts.Metrics.write("drain", len(ops), err)
	}
	cancel()
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

// drainable is a Draining register for each entry that shutdown removes (it may be
// in the registry) and that clients may route to; entries left behind on shutdown
// (KeepOnShutdown: pods stay routable through an agent restart) are not drained
// either. known are the registered entries, the manifest's and those that left it
// (orphans) alike; unsure are those never known to be registered whose register
// failed: it may have landed (a lost reply) or not (a refusal). Each is a Draining
// copy of the last register the registry took (known), or of the last one sent
// (unsure). Where a later register of a registered entry failed, the registry may
// hold either; both carry its key, and the one known to be taken is the safer to
// send again.
func (l *loop) drainable() (known, unsure []registry.Op) {
	add := func(e *entry) {
		if !e.maybe || !e.mayRoute() {
			return
		}
		if e.registered {
			known = append(known, registry.Register(draining(e.written)))
		} else {
			unsure = append(unsure, registry.Register(draining(e.sent)))
		}
	}
	for _, e := range l.entries {
		if !e.m.KeepOnShutdown {
			add(e)
		}
	}
	for _, e := range l.orphans {
		add(e)
	}
	return known, unsure
}

// mayRoute reports whether clients may route to what the registry holds of e: the
// last successful register, or the last one sent, which may have landed since.
func (e *entry) mayRoute() bool {
	return e.sent.Health.Routable() || (e.registered && e.written.Health.Routable())
}

// draining is a copy of ep published as Draining.
func draining(ep endpoint.Endpoint) endpoint.Endpoint {
	d := ep.Clone()
	d.Health = endpoint.Draining
	return d
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
