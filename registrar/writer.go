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
// batch takes what is waiting, coalesced by key, up to limit ops, so a burst costs
// few Applies.
//
// limit starts at maxApplyOps; a batch that fails halves it (down to size) and one
// that succeeds doubles it back. Writes pile up while a backend is down or slow: taken
// whole, they made one Apply longer than its timeout, which failed, was retried whole,
// and grew with every write accepted meanwhile, so nothing was persisted again.
type writer struct {
	view     *view.View
	backend  registry.Registry
	interval time.Duration
	size     int
	timeout  time.Duration // bounds one Apply
	log      *slog.Logger
	m        *metrics
	backoff  backoff.Backoff
	limit    int // the most ops the next batch takes (0: maxApplyOps)
}

// maxApplyOps bounds one Apply: a thousand ops take a backend milliseconds when it is
// well, and stay within the timeout when it is slow.
const maxApplyOps = 1000

// batchLimit is the most ops the next batch takes.
func (w *writer) batchLimit() int {
	if w.limit <= 0 {
		w.limit = maxApplyOps
	}
	return w.limit
}

// adapt halves the batch limit after a failed batch of n ops, and doubles it back
// after one that got through.
func (w *writer) adapt(ok bool, n int) {
	if ok {
		w.limit = min(2*w.batchLimit(), maxApplyOps)
		return
	}
	w.limit = max(min(w.batchLimit(), n)/2, w.size, 1)
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
	batch := w.view.TakeBatch(w.batchLimit())
	if len(batch) == 0 {
		return true
	}
	defer func() { w.adapt(err == nil, len(batch)) }()
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
