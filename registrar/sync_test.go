package registrar

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// cuttable is a backend whose change feed the test can end, and then refuse to
// reopen.
type cuttable struct {
	reads
	cut     chan struct{}
	refused atomic.Bool
}

func (c *cuttable) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	if c.refused.Load() {
		return nil, errors.New("feed unavailable")
	}
	in, err := c.reads.Watch(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make(chan registry.Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-c.cut:
					return
				}
			case <-c.cut:
				return
			}
		}
	}()
	return out, nil
}

// While the change feed is live the whole backend is listed every backstop
// interval, not every sync interval; once the feed is gone, every sync interval
// again.
func TestPollIsABackstopWhileTheFeedIsLive(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	b := &cuttable{reads: reads{Registry: mem}, cut: make(chan struct{})}
	startServer(t, Config{Backend: b, SyncInterval: 10 * time.Millisecond, BackstopInterval: time.Hour})
	time.Sleep(300 * time.Millisecond) // thirty sync intervals
	if l := b.lists.Load(); l != 0 {
		t.Fatalf("%d Lists while the feed was live, want none before the backstop interval", l)
	}
	b.refused.Store(true)
	close(b.cut)
	eventually(t, "polls every sync interval once the feed is gone", func() bool { return b.lists.Load() >= 5 })
}
