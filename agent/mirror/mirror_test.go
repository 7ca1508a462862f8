package mirror

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ep(service, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1}
}

func register(t *testing.T, r registry.Registry, eps ...endpoint.Endpoint) {
	t.Helper()
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	if err := r.Apply(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

func unregister(t *testing.T, r registry.Registry, e endpoint.Endpoint) {
	t.Helper()
	if err := r.Apply(context.Background(), []registry.Op{registry.Unregister(e)}); err != nil {
		t.Fatal(err)
	}
}

// start runs m until the test ends.
func start(t *testing.T, m *Mirror) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor waits until the snapshot holds exactly the given addresses:ports, in order.
func waitFor(t *testing.T, m *Mirror, want ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		eps, synced := m.Snapshot()
		var got []string
		for _, e := range eps {
			got = append(got, endpoint.HostPort(e.Address, e.Port))
		}
		if synced && slices.Equal(got, want) {
			return
		}
		select {
		case <-m.Changed():
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("snapshot = %v (synced %v), want %v", got, synced, want)
		}
	}
}

func TestWatchMode(t *testing.T) {
	r := memory.New()
	defer r.Close()
	register(t, r, ep("web", "10.0.0.2", 80), ep("web", "10.0.0.1", 80))
	m := New(r, Options{})
	if _, synced := m.Snapshot(); synced {
		t.Fatal("synced before Run")
	}
	start(t, m)
	select {
	case <-m.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no change signal for the first complete copy")
	}
	waitFor(t, m, "10.0.0.1:80", "10.0.0.2:80")
	register(t, r, ep("db", "::1", 5432))
	waitFor(t, m, "10.0.0.1:80", "10.0.0.2:80", "[::1]:5432")
	unregister(t, r, ep("web", "10.0.0.1", 80))
	waitFor(t, m, "10.0.0.2:80", "[::1]:5432")
	updated := ep("web", "10.0.0.2", 80)
	updated.Priority = 9
	register(t, r, updated)
	deadline := time.After(10 * time.Second)
	for {
		eps, _ := m.Snapshot()
		if eps[0].Priority == 9 {
			break
		}
		select {
		case <-m.Changed():
		case <-deadline:
			t.Fatal("update not mirrored")
		}
	}
}

func TestFilter(t *testing.T) {
	r := memory.New()
	defer r.Close()
	register(t, r, ep("web", "10.0.0.1", 80), ep("db", "10.0.0.2", 5432))
	m := New(r, Options{Filter: endpoint.Filter{Service: "db"}})
	start(t, m)
	waitFor(t, m, "10.0.0.2:5432")
}

// listOnly hides the memory backend's change feed.
type listOnly struct{ registry.Registry }

// noFeed claims a feed but has none, as a client of a feedless backend might.
type noFeed struct{ registry.Registry }

func (noFeed) Watch(context.Context, endpoint.Filter) (<-chan registry.Event, error) {
	return nil, registry.ErrNoWatch
}

func TestPollMode(t *testing.T) {
	for name, wrap := range map[string]func(registry.Registry) registry.Registry{
		"not a Watcher": func(r registry.Registry) registry.Registry { return listOnly{r} },
		"ErrNoWatch":    func(r registry.Registry) registry.Registry { return noFeed{r} },
	} {
		t.Run(name, func(t *testing.T) {
			r := memory.New()
			defer r.Close()
			register(t, r, ep("web", "10.0.0.1", 80))
			m := New(wrap(r), Options{PollInterval: 20 * time.Millisecond})
			start(t, m)
			waitFor(t, m, "10.0.0.1:80")
			register(t, r, ep("web", "10.0.0.2", 80))
			waitFor(t, m, "10.0.0.1:80", "10.0.0.2:80")
			unregister(t, r, ep("web", "10.0.0.1", 80))
			waitFor(t, m, "10.0.0.2:80")
		})
	}
}

// flaky is the memory backend with an outage switch: while down, List and Watch fail
// and open feeds are cut, like a lost connection.
type flaky struct {
	*registry.Front
	down  atomic.Bool
	mu    sync.Mutex
	feeds []context.CancelFunc
	opens atomic.Int32
}

var errDown = errors.New("backend down")

func (f *flaky) setDown(down bool) {
	f.down.Store(down)
	if down {
		f.mu.Lock()
		for _, c := range f.feeds {
			c()
		}
		f.feeds = nil
		f.mu.Unlock()
	}
}

func (f *flaky) List(ctx context.Context, flt endpoint.Filter) ([]endpoint.Endpoint, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.Front.List(ctx, flt)
}

func (f *flaky) Watch(ctx context.Context, flt endpoint.Filter) (<-chan registry.Event, error) {
	if f.down.Load() {
		return nil, errDown
	}
	f.opens.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	f.feeds = append(f.feeds, cancel)
	f.mu.Unlock()
	return f.Front.Watch(ctx, flt)
}

func TestServesLastKnownGoodAndResyncs(t *testing.T) {
	for name, wrap := range map[string]func(*flaky) registry.Registry{
		"watch": func(f *flaky) registry.Registry { return f },
		"poll":  func(f *flaky) registry.Registry { return listOnly{f} },
	} {
		t.Run(name, func(t *testing.T) {
			f := &flaky{Front: memory.New()}
			defer f.Close()
			register(t, f, ep("web", "10.0.0.1", 80), ep("web", "10.0.0.2", 80))
			m := New(wrap(f), Options{PollInterval: 20 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
			start(t, m)
			waitFor(t, m, "10.0.0.1:80", "10.0.0.2:80")

			f.setDown(true)
			// Changes made during the outage are invisible to the mirror...
			unregister(t, f, ep("web", "10.0.0.1", 80))
			register(t, f, ep("web", "10.0.0.3", 80))
			time.Sleep(100 * time.Millisecond) // let a few retries fail
			eps, synced := m.Snapshot()
			if !synced || len(eps) != 2 || eps[0].Address != "10.0.0.1" {
				t.Fatalf("during the outage the snapshot is %v (synced %v); want the last known good copy", eps, synced)
			}
			// ...and appear once it ends, including the removal.
			f.setDown(false)
			waitFor(t, m, "10.0.0.2:80", "10.0.0.3:80")
			if name == "watch" && f.opens.Load() < 2 {
				t.Errorf("watch opened %d times, want a re-open after the outage", f.opens.Load())
			}
		})
	}
}

func TestRetryFollowsOptions(t *testing.T) {
	m := New(nil, Options{RetryMin: 100 * time.Millisecond, RetryMax: time.Second})
	for range 20 {
		b := m.retry()
		for n := range 70 {
			ceiling := min(100*time.Millisecond<<min(n, 20), time.Second) + time.Millisecond
			if d := b.Next(); d <= 0 || d > ceiling {
				t.Fatalf("retry %d waits %s, want in (0, %s]", n, d, ceiling)
			}
		}
	}
}
