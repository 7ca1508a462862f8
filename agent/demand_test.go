package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// demandOutput is an output that needs the services it is told, and records what
// it was last given.
type demandOutput struct {
	mu       sync.Mutex
	services []string
	all      bool
	got      []endpoint.Endpoint
	changed  chan struct{}
}

func newDemandOutput(services ...string) *demandOutput {
	return &demandOutput{services: services, changed: make(chan struct{}, 1)}
}

func (o *demandOutput) Name() string { return "demand" }

func (o *demandOutput) Update(_ context.Context, eps []endpoint.Endpoint) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = slices.Clone(eps)
	return true, nil
}

func (o *demandOutput) Demand() ([]string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.services), o.all
}

func (o *demandOutput) DemandChanged() <-chan struct{} { return o.changed }

func (o *demandOutput) want(all bool, services ...string) {
	o.mu.Lock()
	o.services, o.all = services, all
	o.mu.Unlock()
	o.changed <- struct{}{}
}

// addresses is what the output was last given, as "service address" strings.
func (o *demandOutput) addresses() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, e := range o.got {
		out = append(out, e.Service+" "+e.Address)
	}
	slices.Sort(out)
	return out
}

// watchLog records the filters a backend is watched with.
type watchLog struct {
	registry.Registry
	mu      sync.Mutex
	filters []string
}

func (w *watchLog) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	w.mu.Lock()
	w.filters = append(w.filters, f.Service)
	w.mu.Unlock()
	return w.Registry.(registry.Watcher).Watch(ctx, f)
}

func (w *watchLog) watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.filters)
}

func runDiscovery(t *testing.T, src registry.Registry, outputs ...Output) {
	t.Helper()
	d := NewDiscovery(src, outputs, DiscoveryOptions{Debounce: 20 * time.Millisecond, PollInterval: 50 * time.Millisecond, RetryInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.Ready():
	case <-time.After(wait):
		t.Fatal("discovery never became ready")
	}
}

func waitAddresses(t *testing.T, o *demandOutput, want ...string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !slices.Equal(o.addresses(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output has %q, want %q", o.addresses(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// When every output says what it needs, the agent watches just those services, one
// watch each, and follows the demand as it changes.
func TestDiscoveryReadsOnlyWhatOutputsDemand(t *testing.T) {
	for _, polled := range []bool{false, true} {
		name := "watched"
		if polled {
			name = "polled"
		}
		t.Run(name, func(t *testing.T) {
			r := newMemory(t)
			apply := func(ops ...registry.Op) {
				t.Helper()
				if err := r.Apply(context.Background(), ops); err != nil {
					t.Fatal(err)
				}
			}
			apply(registry.Register(ep("web", "10.0.0.1", 80, 0)), registry.Register(ep("db", "10.0.0.2", 80, 0)),
				registry.Register(ep("cache", "10.0.0.3", 80, 0)))
			log := &watchLog{Registry: r}
			var src registry.Registry = log
			if polled {
				src = listOnly{r}
			}
			o := newDemandOutput("web")
			runDiscovery(t, src, o)
			waitAddresses(t, o, "web 10.0.0.1")
			if !polled && !slices.Equal(log.watched(), []string{"web"}) {
				t.Fatalf("backend watched with services %q, want only web", log.watched())
			}

			apply(registry.Register(ep("cache", "10.0.0.4", 80, 0)), registry.Register(ep("web", "10.0.0.5", 80, 0)))
			waitAddresses(t, o, "web 10.0.0.1", "web 10.0.0.5")

			o.want(false, "web", "db")
			waitAddresses(t, o, "db 10.0.0.2", "web 10.0.0.1", "web 10.0.0.5")
			o.want(false, "db")
			waitAddresses(t, o, "db 10.0.0.2")
			o.want(true)
			waitAddresses(t, o, "cache 10.0.0.3", "cache 10.0.0.4", "db 10.0.0.2", "web 10.0.0.1", "web 10.0.0.5")
			o.want(false)
			waitAddresses(t, o)
		})
	}
}

// One output that cannot say what it needs makes the agent read everything.
func TestDiscoveryReadsEverythingForOutputsWithoutDemand(t *testing.T) {
	r := newMemory(t)
	if err := r.Apply(context.Background(), []registry.Op{registry.Register(ep("web", "10.0.0.1", 80, 0)), registry.Register(ep("db", "10.0.0.2", 80, 0))}); err != nil {
		t.Fatal(err)
	}
	log := &watchLog{Registry: r}
	o := newDemandOutput("web")
	all := newDemandOutput()
	runDiscovery(t, log, o, plainOutput{all})
	waitAddresses(t, all, "db 10.0.0.2", "web 10.0.0.1")
	if got := log.watched(); !slices.Equal(got, []string{""}) {
		t.Fatalf("backend watched with services %q, want one watch of everything", got)
	}
}

// plainOutput hides an output's demand.
type plainOutput struct{ o *demandOutput }

func (p plainOutput) Name() string { return "plain" }
func (p plainOutput) Update(ctx context.Context, eps []endpoint.Endpoint) (bool, error) {
	return p.o.Update(ctx, eps)
}
