package registrar

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
)

// writer persists accepted writes in batches: one backend Apply per batch, flushed
// every interval or as soon as size writes are waiting, whichever comes first. A
// batch takes everything waiting, coalesced by key, so a burst costs few Applies.
type writer struct {
	view     *view.View
	backend  registry.Registry
	interval time.Duration
	size     int
	timeout  time.Duration // bounds one Apply
	log      *slog.Logger
	m        *metrics
	backoff  backoff.Backoff
}

// run flushes batches until ctx ends.
func (w *writer) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if w.view.DirtyCount() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.view.Work():
			}
		}
		// Collect for up to one interval, or until a full batch is waiting.
		timer.Reset(w.interval)
	collect:
		for w.view.DirtyCount() < w.size {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				break collect
			case <-w.view.Work():
			}
		}
		if !w.flushOnce(ctx) {
			if !w.backoff.Wait(ctx) {
				return
			}
			continue
		}
		w.backoff.Reset()
	}
}

// flushOnce writes one batch and reports whether the backend took all of it.
func (w *writer) flushOnce(ctx context.Context) bool {
	var err error
	batch := w.view.TakeBatch()
	if len(batch) == 0 {
		return true
	}
	ops := make([]registry.Op, len(batch))
	for i, b := range batch {
		ops[i] = b.Op
	}
	w.m.batchSize.Observe(float64(len(ops)))
	tctx, endBatch := traceBatch(ctx, batch) // tracing.go
	defer func() { endBatch(err) }()
	actx, cancel := context.WithTimeout(tctx, w.timeout)
	actx, endApply := traceBackend(actx, w.backend, ops)
	err = w.backend.Apply(actx, ops)
	endApply(err)
	cancel()
	if err == nil {
		w.m.batches.WithLabelValues("ok").Inc()
		w.view.BatchDone(batch, nil, false)
		return true
	}
	w.m.batches.WithLabelValues("error").Inc()
	failed := map[endpoint.Key]bool{}
	var ae *registry.ApplyError
	if errors.As(err, &ae) {
		for _, k := range ae.Failed {
			failed[k] = true
		}
	} else {
		for _, b := range batch {
			failed[b.Op.Endpoint.Key()] = true
		}
	}
	// The registrar validated every write, so a rejection means the backend has
	// stricter rules: retrying would never succeed.
	permanent := errors.Is(err, endpoint.ErrInvalid)
	dropped := w.view.BatchDone(batch, failed, permanent)
	if permanent {
		w.log.Error("backend rejected writes; dropped them", "dropped", dropped, "err", err)
		return true
	}
	w.log.Warn("persisting write batch failed; will retry", "ops", len(ops), "failed", len(failed), "err", err)
	return false
}

// drain flushes until every accepted write is persisted or ctx ends, and returns the
// number of writes left unpersisted.
func (w *writer) drain(ctx context.Context) int {
	for w.view.PendingCount() > 0 {
		if w.view.DirtyCount() == 0 {
			// Everything left is in flight in a batch that was cut short; it is
			// marked dirty again by BatchDone, so this only waits for that.
			if !backoff.Sleep(ctx, 10*time.Millisecond) {
				break
			}
			continue
		}
		if !w.flushOnce(ctx) && !w.backoff.Wait(ctx) {
			break
		}
	}
	return w.view.PendingCount()
}
