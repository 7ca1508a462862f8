package registry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script is a driver whose behaviour each test sets: it records what the front hands
// it, and can block, fail, or send a watch's events as written. It stands for the
// backends that misbehave in ways the real ones rarely show on demand.
type script struct {
	mu      sync.Mutex
	applied [][]registry.Op
	listed  []endpoint.Filter
	closed  int

	apply  func(ctx context.Context) error
	events []registry.Event
	// hold keeps a watch's channel open after its events until ctx ends.
	hold bool
	// watchDone is closed when the driver's watch goroutine is about to close its channel.
	watchDone chan struct{}
}

func (s *script) Apply(ctx context.Context, ops []registry.Op) error {
	s.mu.Lock()
	s.applied = append(s.applied, ops)
	s.mu.Unlock()
	if s.apply != nil {
		return s.apply(ctx)
	}
	return nil
}

func (s *script) List(_ context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed = append(s.listed, f)
	return nil, nil
}

func (s *script) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	if s.watchDone != nil {
		select {
		case <-s.watchDone:
		default:
			return errors.New("closed before its watch had returned")
		}
	}
	return errors.New("driver close error")
}

func (s *script) Watch(ctx context.Context, _ endpoint.Filter) (<-chan registry.Event, error) {
	out := make(chan registry.Event)
	s.watchDone = make(chan struct{})
	go func() {
		// Deferred calls run last-first: watchDone closes before out, because
		// out's close is all a Front sees of the watch returning. In the other
		// order Close could legitimately run between the two and fail the test.
		defer close(out)
		defer close(s.watchDone)
		for _, ev := range s.events {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
		if s.hold {
			<-ctx.Done()
		}
	}()
	return out, nil
}

// noFeed is a driver without Watch.
type noFeed struct{ *script }

func (noFeed) Watch() {} // a method of another shape: not a registry.WatchDriver

func ep(addr string) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: addr, Port: 80, Priority: 1}
}

func TestFrontHandsTheDriverCheckedInput(t *testing.T) {
	s := &script{}
	f := registry.NewFront("script", s)
	defer f.Close()
	ctx := context.Background()
	a, b := ep("10.0.0.1"), ep("10.0.0.2")
	a2 := a.Clone()
	a2.Priority = 7
	if err := f.Apply(ctx, []registry.Op{registry.Register(a), registry.Register(b), registry.Register(a2)}); err != nil {
		t.Fatal(err)
	}
	bad := ep("10.0.0.3")
	bad.Priority = 0
	if err := f.Apply(ctx, []registry.Op{registry.Register(a), registry.Register(bad)}); !errors.Is(err, endpoint.ErrInvalid) {
		t.Fatalf("Apply with an invalid endpoint = %v, want endpoint.ErrInvalid", err)
	}
	if err := f.Apply(ctx, nil); err != nil {
		t.Fatalf("empty Apply = %v", err)
	}
	if _, err := f.List(ctx, endpoint.Filter{Service: "*", Address: "2001:DB8:0::1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.List(ctx, endpoint.Filter{Service: "9web"}); !errors.Is(err, endpoint.ErrInvalid) || !strings.Contains(err.Error(), "service") {
		t.Fatalf("List with an invalid service = %v, want endpoint.ErrInvalid naming the service", err)
	}
	if len(s.applied) != 1 || len(s.applied[0]) != 2 || s.applied[0][0].Endpoint.Priority != 7 {
		t.Fatalf("driver got batches %v, want one netted batch (a with priority 7, b)", s.applied)
	}
	want := endpoint.Filter{Address: "2001:db8::1"}
	if !slices.Equal(s.listed, []endpoint.Filter{want}) {
		t.Fatalf("driver got filters %+v, want only the normalised %+v", s.listed, want)
	}
}

func TestFrontCloseEndsAndWaitsForCalls(t *testing.T) {
	entered := make(chan struct{})
	var returned atomic.Bool
	s := &script{apply: func(ctx context.Context) error {
		close(entered)
		defer returned.Store(true)
		<-ctx.Done() // a backend waiting on the network, until Close cuts it short
		time.Sleep(20 * time.Millisecond)
		return errors.New("connection torn down")
	}}
	f := registry.NewFront("script", s)
	errc := make(chan error, 1)
	go func() { errc <- f.Apply(context.Background(), []registry.Op{registry.Register(ep("10.0.0.1"))}) }()
	<-entered
	if err := f.Close(); err == nil || err.Error() != "driver close error" {
		t.Fatalf("Close = %v, want the driver's error", err)
	}
	if !returned.Load() {
		t.Fatal("Close returned while the driver's Apply was still running")
	}
	if err := <-errc; !errors.Is(err, registry.ErrClosed) || !strings.Contains(err.Error(), "connection torn down") {
		t.Fatalf("Apply cut short by Close = %v, want ErrClosed with the driver's words", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if s.closed != 1 {
		t.Fatalf("driver closed %d times, want once", s.closed)
	}
	for _, err := range []error{
		f.Apply(context.Background(), []registry.Op{registry.Register(ep("10.0.0.1"))}),
		func() error { _, err := f.List(context.Background(), endpoint.Filter{}); return err }(),
		func() error { _, err := f.Watch(context.Background(), endpoint.Filter{}); return err }(),
	} {
		if !errors.Is(err, registry.ErrClosed) {
			t.Errorf("call after Close = %v, want ErrClosed", err)
		}
	}
}

func TestFrontMapsTheCallersCancellation(t *testing.T) {
	s := &script{apply: func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("rpc error: code = Unavailable") // a backend that loses the cause
	}}
	f := registry.NewFront("script", s)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := f.Apply(ctx, []registry.Op{registry.Register(ep("10.0.0.1"))})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Apply past its deadline = %v, want context.DeadlineExceeded", err)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := f.Apply(done, []registry.Op{registry.Register(ep("10.0.0.1"))}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled context = %v, want context.Canceled", err)
	}
	if len(s.applied) != 1 {
		t.Fatalf("driver got %d calls, want 1: a call whose context had ended must not reach it", len(s.applied))
	}
}

func collect(t *testing.T, ch <-chan registry.Event, n int) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %v", out)
			}
			out = append(out, ev.Type.String()+" "+ev.Endpoint.Address)
		case <-time.After(5 * time.Second):
			t.Fatalf("no event after %v", out)
		}
	}
	return out
}

func expectClosed(t *testing.T, ch <-chan registry.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event %s %s", ev.Type, ev.Endpoint.Key())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel still open")
	}
}

func TestFrontKeepsWatchesConsistent(t *testing.T) {
	a, b, c := ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.3")
	a2 := a
	a2.Weight = 2
	s := &script{events: []registry.Event{
		{Type: registry.Added, Endpoint: a},
		{Type: registry.Removed, Endpoint: b}, // never sent: dropped
		{Type: registry.Synced},
		{Type: registry.Added, Endpoint: a2},   // held: an update
		{Type: registry.Updated, Endpoint: a2}, // as held: dropped
		{Type: registry.Updated, Endpoint: c},  // not held: an addition
		{Type: registry.Synced},                // once only
		{Type: registry.Removed, Endpoint: a},
		{Type: registry.Removed, Endpoint: a}, // no longer held
	}}
	f := registry.NewFront("script", s)
	ch, err := f.Watch(context.Background(), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 5)
	want := []string{"added 10.0.0.1", "synced ", "updated 10.0.0.1", "added 10.0.0.3", "removed 10.0.0.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// The driver's channel closed: so does the caller's.
	expectClosed(t, ch)
	if err := f.Close(); err == nil || err.Error() != "driver close error" {
		t.Fatalf("Close = %v; the driver must be closed only after its watch returned", err)
	}
}

func TestFrontEndsWatches(t *testing.T) {
	for _, c := range []struct {
		name   string
		end    func(t *testing.T, cancel context.CancelFunc, f *registry.Front)
		reason string
	}{
		{"context", func(_ *testing.T, cancel context.CancelFunc, _ *registry.Front) { cancel() }, "context"},
		{"close", func(t *testing.T, _ context.CancelFunc, f *registry.Front) {
			// Close ends the live watch and must wait for it before closing the driver.
			if err := f.Close(); err == nil || err.Error() != "driver close error" {
				t.Errorf("Close = %v; the driver must be closed only after its watch returned", err)
			}
		}, "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &script{events: []registry.Event{{Type: registry.Synced}}, hold: true}
			f := registry.NewFront("script", s)
			defer f.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := f.Watch(ctx, endpoint.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			collect(t, ch, 1)
			c.end(t, cancel, f)
			expectClosed(t, ch)
			// The forwarder counts the end once the driver's channel is closed.
			deadline := time.Now().Add(5 * time.Second)
			for counter(t, f, "registry_watch_ends_total", map[string]string{"reason": c.reason}) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("registry_watch_ends_total{reason=%q} never reached 1", c.reason)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// counter reads one series of f's counters, 0 if it is absent.
func counter(t *testing.T, f *registry.Front, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// nilFeed is a driver whose Watch returns no channel and no error.
type nilFeed struct{ *script }

func (nilFeed) Watch(context.Context, endpoint.Filter) (<-chan registry.Event, error) {
	return nil, nil
}

func TestFrontRefusesAWatchWithoutChannel(t *testing.T) {
	f := registry.NewFront("nilfeed", nilFeed{&script{}})
	if _, err := f.Watch(context.Background(), endpoint.Filter{}); err == nil || !strings.Contains(err.Error(), "no channel") {
		t.Fatalf("Watch = %v, want an error saying the backend returned no channel", err)
	}
	done := make(chan struct{})
	go func() { _ = f.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on the refused watch")
	}
}

func TestFrontWithoutAChangeFeed(t *testing.T) {
	f := registry.NewFront("nofeed", noFeed{&script{}})
	defer f.Close()
	if f.CanWatch() {
		t.Fatal("CanWatch on a driver without Watch")
	}
	if _, err := f.Watch(context.Background(), endpoint.Filter{}); !errors.Is(err, registry.ErrNoWatch) || !strings.Contains(err.Error(), "nofeed") {
		t.Fatalf("Watch = %v, want ErrNoWatch naming the backend", err)
	}
}

func TestFrontCountsCalls(t *testing.T) {
	f := memory.New()
	defer f.Close()
	ctx := context.Background()
	_ = f.Apply(ctx, []registry.Op{registry.Register(ep("10.0.0.1"))})
	_, _ = f.List(ctx, endpoint.Filter{Service: "9web"})
	_, _ = f.List(ctx, endpoint.Filter{})
	_ = f.Close()
	_, _ = f.List(ctx, endpoint.Filter{})
	if problems, err := testutil.CollectAndLint(f); err != nil || len(problems) != 0 {
		t.Fatalf("metrics lint: %v %v", problems, err)
	}
	for _, c := range []struct {
		op, result string
		n          float64
	}{{"apply", "ok", 1}, {"list", "invalid", 1}, {"list", "ok", 1}, {"list", "closed", 1}, {"watch", "ok", 0}} {
		labels := map[string]string{"backend": "memory", "op": c.op, "result": c.result}
		if n := counter(t, f, "registry_calls_total", labels); n != c.n {
			t.Errorf("registry_calls_total%v = %v, want %v", labels, n, c.n)
		}
	}
}

func TestCachedListThroughTheFrontIsFree(t *testing.T) {
	f := memory.New()
	defer f.Close()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := f.List(ctx, endpoint.Filter{Service: "web"}); err != nil {
			t.Fatal(err)
		}
	})
	// An empty answer costs the memory backend nothing; the front adds nothing.
	if allocs != 0 {
		t.Fatalf("List through the front allocates %v times, want 0", allocs)
	}
}
