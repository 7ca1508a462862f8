package mirror

import (
	"context"
	"errors"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/follow"
)

// watchLoop follows the change feed, opening it again whenever it ends. The initial
// state of each watch is swapped in whole at Synced, so a re-opened feed replaces
// the copy without showing a half-built one. It returns registry.ErrNoWatch if the
// backend turns out to have no feed, nil when ctx ends.
func (m *Mirror) watchLoop(ctx context.Context, w registry.Watcher) error {
	err := follow.Run(ctx, w, m.opts.Filter, m.retry(), follow.Handler{
		Synced:  m.replace,
		Changed: m.apply,
		Ended: func(err error, _ bool, wait time.Duration) {
			if wait > 0 {
				m.log.Warn("registry watch interrupted; serving the last known endpoints", "err", err, "retry_in", wait)
			}
		},
	})
	if errors.Is(err, registry.ErrNoWatch) {
		return err
	}
	return nil
}
