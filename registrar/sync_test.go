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
	ts := startServer(t, Config{Backend: b, SyncInterval: 10 * time.Millisecond, BackstopInterval: time.Hour})
	// The first read is the feed's, or a poll's when the feed took longer than one
	// sync interval to deliver (as on a loaded machine): count from the feed's.
	eventually(t, "registrar_change_feed_live is 1", func() bool { return feedLive(t, ts) == 1 })
	before := b.lists.Load()
	time.Sleep(300 * time.Millisecond) // thirty sync intervals
	if l := b.lists.Load() - before; l != 0 {
		t.Fatalf("%d Lists while the feed was live, want none before the backstop interval", l)
	}
	b.refused.Store(true)
	close(b.cut)
	eventually(t, "polls every sync interval once the feed is gone", func() bool { return b.lists.Load()-before >= 5 })
	if v := feedLive(t, ts); v != 0 {
		t.Fatalf("registrar_change_feed_live = %v while polling, want 0", v)
	}
}

// feedLive reads registrar_change_feed_live from ts's /metrics.
func feedLive(t *testing.T, ts *testServer) float64 {
	t.Helper()
	ms := scrape(t, ts)["registrar_change_feed_live"].GetMetric()
	if len(ms) != 1 {
		t.Fatalf("registrar_change_feed_live: %d series, want 1", len(ms))
	}
	return ms[0].GetGauge().GetValue()
}
