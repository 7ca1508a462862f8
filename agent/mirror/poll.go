package mirror

import (
	"context"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// pollLoop lists the registry every PollInterval, and sooner after a failure.
func (m *Mirror) pollLoop(ctx context.Context) {
	for failures := 0; ; {
		wait := m.opts.PollInterval
		if err := m.pollOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(m.backoff(failures), m.opts.PollInterval)
			failures++
			m.log.Warn("registry list failed; serving the last known endpoints", "err", err, "retry_in", wait)
		} else {
			failures = 0
		}
		if !sleep(ctx, wait) {
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
