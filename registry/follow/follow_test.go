package follow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/follow"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ep(addr string) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: addr, Port: 80, Priority: 1}
}

// cuttable is the memory backend whose open watches can be cut, as a lost connection
// would end them.
type cuttable struct {
	*registry.Front
	mu    sync.Mutex
	cuts  []context.CancelFunc
	opens int
}

func (c *cuttable) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cuts = append(c.cuts, cancel)
	c.opens++
	c.mu.Unlock()
	return c.Front.Watch(ctx, f)
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.cuts {
		cancel()
	}
	c.cuts = nil
}

// copyOf is what a handler keeps: the copy, and what happened to it, in order.
type copyOf struct {
	mu      sync.Mutex
	state   map[endpoint.Key]endpoint.Endpoint
	log     []string
	changed chan struct{}
}

func newCopy() *copyOf { return &copyOf{changed: make(chan struct{}, 100)} }

func (c *copyOf) handler() follow.Handler {
	return follow.Handler{
		Open: func() { c.note("open") },
		Synced: func(s map[endpoint.Key]endpoint.Endpoint) {
			c.mu.Lock()
			c.state = s
			c.mu.Unlock()
			c.note("synced")
		},
		Changed: func(ev registry.Event) {
			c.mu.Lock()
			if ev.Type == registry.Removed {
				delete(c.state, ev.Endpoint.Key())
			} else {
				c.state[ev.Endpoint.Key()] = ev.Endpoint
			}
			c.mu.Unlock()
			c.note(ev.Type.String() + " " + ev.Endpoint.Address)
		},
		Ended: func(err error, synced bool, wait time.Duration) {
			if wait == 0 {
				c.note("ended, returning")
				return
			}
			if synced {
				c.note("ended after sync")
			} else {
				c.note("ended before sync")
			}
		},
	}
}

func (c *copyOf) note(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
	c.changed <- struct{}{}
}

// waitFor waits until cond holds on the copy.
func (c *copyOf) waitFor(t *testing.T, what string, cond func(state map[endpoint.Key]endpoint.Endpoint, log []string) bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		ok := cond(c.state, c.log)
		log := append([]string(nil), c.log...)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("%s: not after 5s; log %q", what, log)
		}
	}
}

func count(log []string, s string) int {
	n := 0
	for _, l := range log {
		if l == s {
			n++
		}
	}
	return n
}

func TestRunFollowsAndReopens(t *testing.T) {
	src := &cuttable{Front: memory.New()}
	defer src.Close()
	ctx := context.Background()
	if err := src.Apply(ctx, []registry.Op{registry.Register(ep("10.0.0.1")), registry.Register(ep("10.0.0.2"))}); err != nil {
		t.Fatal(err)
	}
	c := newCopy()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- follow.Run(runCtx, src, endpoint.Filter{}, backoff.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}, c.handler())
	}()
	c.waitFor(t, "initial state handed over whole", func(s map[endpoint.Key]endpoint.Endpoint, log []string) bool {
		return len(s) == 2 && count(log, "synced") == 1
	})
	if err := src.Apply(ctx, []registry.Op{registry.Unregister(ep("10.0.0.1")), registry.Register(ep("10.0.0.3"))}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "changes after Synced", func(s map[endpoint.Key]endpoint.Endpoint, _ []string) bool {
		_, gone := s[ep("10.0.0.1").Key()]
		_, added := s[ep("10.0.0.3").Key()]
		return len(s) == 2 && !gone && added
	})
	// Cut the watch and change the backend meanwhile: the watch opened again hands
	// over the new state whole.
	src.cut()
	if err := src.Apply(ctx, []registry.Op{registry.Register(ep("10.0.0.4"))}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "reopened and synced again", func(s map[endpoint.Key]endpoint.Endpoint, log []string) bool {
		return count(log, "synced") == 2 && len(s) == 3
	})
	c.mu.Lock()
	log := append([]string(nil), c.log...)
	c.mu.Unlock()
	if count(log, "open") != 2 || count(log, "ended after sync") != 1 {
		t.Fatalf("log %q: want two opens and one end after sync", log)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after its context ended = %v, want nil", err)
	}
	// The last watch is over too, and its handler heard so.
	c.mu.Lock()
	defer c.mu.Unlock()
	if last := c.log[len(c.log)-1]; last != "ended, returning" {
		t.Fatalf("log %q: the last watch's end was not reported", c.log)
	}
}

func TestRunStopsWithoutAChangeFeed(t *testing.T) {
	src := registry.NewFront("nofeed", struct{ registry.Registry }{memory.New()})
	defer src.Close()
	var ended error
	err := follow.Run(context.Background(), src, endpoint.Filter{}, backoff.Backoff{Min: time.Millisecond, Max: time.Millisecond}, follow.Handler{
		Synced:  func(map[endpoint.Key]endpoint.Endpoint) { t.Error("Synced without a feed") },
		Changed: func(registry.Event) { t.Error("Changed without a feed") },
		Ended:   func(err error, _ bool, _ time.Duration) { ended = err },
	})
	if !errors.Is(err, registry.ErrNoWatch) || !errors.Is(ended, registry.ErrNoWatch) {
		t.Fatalf("Run = %v (Ended got %v), want registry.ErrNoWatch for both", err, ended)
	}
}

// A watch that keeps failing before Synced backs off further each time; one that
// reached Synced starts over.
func TestRunBacksOffUntilASync(t *testing.T) {
	var mu sync.Mutex
	var waits []time.Duration
	fails := 3
	w := watchFunc(func(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return nil, registry.ErrUnavailable
		}
		ch := make(chan registry.Event, 1)
		ch <- registry.Event{Type: registry.Synced}
		close(ch)
		return ch, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	retry := backoff.Backoff{Min: time.Millisecond, Max: time.Hour, Rand: func(n int64) int64 { return n - 1 }}
	_ = follow.Run(ctx, w, endpoint.Filter{}, retry, follow.Handler{
		Synced:  func(map[endpoint.Key]endpoint.Endpoint) {},
		Changed: func(registry.Event) {},
		Ended: func(_ error, _ bool, wait time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if wait == 0 {
				return // Run is returning
			}
			waits = append(waits, wait)
			if len(waits) == 5 {
				stop()
			}
		},
	})
	want := []time.Duration{1, 2, 4, 1, 1} // three failures, then synced watches
	for i := range want {
		want[i] *= time.Millisecond
	}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
}

type watchFunc func(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error)

func (w watchFunc) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return w(ctx, f)
}
