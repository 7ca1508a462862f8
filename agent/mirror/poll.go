package mirror

import (
	"context"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
)

// pollLoop lists the registry every PollInterval, and sooner after a failure.
func (m *Mirror) pollLoop(ctx context.Context) {
	b := m.retry()
	for {
		wait := m.opts.PollInterval
		if err := m.pollOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(b.Next(), m.opts.PollInterval)
			m.log.Warn("registry list failed; serving the last known endpoints", "err", err, "retry_in", wait)
		} else {
			b.Reset()
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

func (m *Mirror) pollOnce(ctx context.Context) error {
	eps, err := m.src.List(ctx, m.opts.Filter)
	if err != nil {
		return err
	}
	entries := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
	for _, e := range eps {
		entries[e.Key()] = e
	}
	m.replace(entries)
	return nil
}
