package cloudmap

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a fake Cloud Map and a registry on it, driven through the real SDK.
type fixture struct {
	t     *testing.T
	fake  *cloudmaptest.Server
	reg   reg
	ctx   context.Context
	clock *clock
}

func newFixture(t *testing.T, fakeOpts cloudmaptest.Options, opts Options) *fixture {
	t.Helper()
	fake := cloudmaptest.NewServer(fakeOpts)
	t.Cleanup(fake.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, fake: fake, ctx: ctx, clock: &clock{now: time.Now()}}
	opts.Client = fake.NewClient()
	if opts.Namespace == "" {
		opts.Namespace = "test"
		opts.CreateNamespace = true
	}
	if opts.Now == nil {
		opts.Now = f.clock.Now
	}
	r, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	f.reg = reg{Front: r, driver: r.Driver().(*driver)}
	return f
}

// reg is a registry: the front the tests call, and its driver for what they look at
// behind it.
type reg struct {
	*registry.Front
	*driver
}

func (r reg) Apply(ctx context.Context, ops []registry.Op) error { return r.Front.Apply(ctx, ops) }
func (r reg) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	return r.Front.List(ctx, f)
}
func (r reg) Close() error { return r.Front.Close() }

func (f *fixture) apply(ops ...registry.Op) {
	f.t.Helper()
	if err := f.reg.Apply(f.ctx, ops); err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
}

func (f *fixture) list(flt endpoint.Filter) []endpoint.Endpoint {
	f.t.Helper()
	eps, err := f.reg.List(f.ctx, flt)
	if err != nil {
		f.t.Fatalf("List(%+v): %v", flt, err)
	}
	return eps
}

// eventually polls cond for up to ten seconds.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clock is a settable time source for TTL tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func ep(cluster, service, protocol, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: 1}
}

func keyStrings(eps []endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	return out
}
