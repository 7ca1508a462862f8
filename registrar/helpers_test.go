package registrar

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ep(cluster, service, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1}
}

// faulty wraps a real backend and fails or counts its calls on demand, to drive the
// writer's retry paths.
type faulty struct {
	registry.Registry
	failApply atomic.Bool
	failList  atomic.Bool
	reject    atomic.Bool // Apply fails as if the backend found the endpoints invalid
	failed    atomic.Int64
	applies   atomic.Int64
	ops       atomic.Int64
	mu        sync.Mutex
	batches   [][]registry.Op
}

var errDown = fmt.Errorf("%w: injected outage", registry.ErrUnavailable)

func (f *faulty) Apply(ctx context.Context, ops []registry.Op) error {
	if f.failApply.Load() {
		f.failed.Add(1)
		return errDown
	}
	if f.reject.Load() {
		f.failed.Add(1)
		return fmt.Errorf("op 0: %w: backend-specific rule", endpoint.ErrInvalid)
	}
	f.applies.Add(1)
	f.ops.Add(int64(len(ops)))
	f.mu.Lock()
	f.batches = append(f.batches, append([]registry.Op(nil), ops...))
	f.mu.Unlock()
	return f.Registry.Apply(ctx, ops)
}

func (f *faulty) batchesCopy() [][]registry.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]registry.Op(nil), f.batches...)
}

func (f *faulty) List(ctx context.Context, flt endpoint.Filter) ([]endpoint.Endpoint, error) {
	if f.failList.Load() {
		return nil, errDown
	}
	return f.Registry.List(ctx, flt)
}

// pollOnly hides the backend's change feed, so the registrar must poll.
type pollOnly struct{ registry.Registry }

type testServer struct {
	*Server
	conn   *grpc.ClientConn
	client registrarv1.RegistrarClient
	done   chan error
	cancel context.CancelFunc
}

// startServer runs a registrar on 127.0.0.1:0 and connects a raw client to it.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerWith(t, ServerConfig{Registrar: cfg})
}

// startServerWith is startServer for a server configured beyond its registrar; its
// addresses are always 127.0.0.1:0.
func startServerWith(t *testing.T, sc ServerConfig) *testServer {
	t.Helper()
	cfg := &sc.Registrar
	if cfg.Cluster == "" {
		cfg.Cluster = "east"
	}
	if cfg.Backend == nil {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		cfg.Backend = b
	}
	sc.Listen, sc.HealthListen = "127.0.0.1:0", "127.0.0.1:0"
	s, err := NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: s, done: make(chan error, 1), cancel: cancel}
	go func() { ts.done <- s.Run(ctx) }()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ts.conn, ts.client = conn, registrarv1.NewRegistrarClient(conn)
	t.Cleanup(func() {
		conn.Close()
		ts.stop(t)
	})
	waitReady(t, s.Registrar())
	return ts
}

// stop shuts the server down gracefully (idempotent) and returns Run's error.
func (ts *testServer) stop(t *testing.T) error {
	t.Helper()
	ts.cancel()
	select {
	case err, ok := <-ts.done:
		if ok {
			close(ts.done)
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("registrar server did not stop within 30s")
		return nil
	}
}

func waitReady(t *testing.T, r *Registrar) {
	t.Helper()
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("registrar not ready within 10s")
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func protos(eps ...endpoint.Endpoint) []*registryv1.Endpoint {
	out := make([]*registryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e.ToProto()
	}
	return out
}

// eventually polls cond every 10ms until it holds or 20s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawWatch is a watch stream read by a goroutine into a channel. PROGRESS events,
// which change nothing, go to a channel of their own.
type rawWatch struct {
	events   chan *registrarv1.EndpointEvent
	progress chan *registrarv1.EndpointEvent
	err      chan error
	cancel   context.CancelFunc
}

func openWatch(t *testing.T, c registrarv1.RegistrarClient, token string) *rawWatch {
	t.Helper()
	return openWatchReq(t, c, &registrarv1.WatchEndpointsRequest{NodeName: "test", LastVersion: token})
}

// openWatchReq is openWatch with a request of the caller's.
func openWatchReq(t *testing.T, c registrarv1.RegistrarClient, req *registrarv1.WatchEndpointsRequest) *rawWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.WatchEndpoints(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return readWatch(t, st.Recv, cancel)
}

// readWatch reads a watch stream in the background into a rawWatch.
func readWatch(t *testing.T, recv func() (*registrarv1.EndpointEvent, error), cancel context.CancelFunc) *rawWatch {
	w := &rawWatch{events: make(chan *registrarv1.EndpointEvent, 100000), progress: make(chan *registrarv1.EndpointEvent, 100000),
		err: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			ev, err := recv()
			if err != nil {
				w.err <- err
				close(w.events)
				return
			}
			if ev.GetType() == registrarv1.EndpointEvent_PROGRESS {
				w.progress <- ev
				continue
			}
			w.events <- ev
		}
	}()
	t.Cleanup(func() {
		cancel()
		for range w.events {
		}
	})
	return w
}

func (w *rawWatch) next(t *testing.T) *registrarv1.EndpointEvent {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if !ok {
			t.Fatalf("watch ended: %v", <-w.err)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
		return nil
	}
}

// untilComplete reads a whole initial phase and returns the endpoints it carried
// (snapshot parts or changes) and the SNAPSHOT_COMPLETE event.
func (w *rawWatch) untilComplete(t *testing.T) ([]*registrarv1.EndpointEvent, *registrarv1.EndpointEvent) {
	t.Helper()
	var evs []*registrarv1.EndpointEvent
	for {
		ev := w.next(t)
		if ev.GetType() == registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
			return evs, ev
		}
		evs = append(evs, ev)
	}
}

// quiet checks that nothing arrives for d.
func (w *rawWatch) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if ok {
			t.Fatalf("unexpected event %v", ev)
		}
	case <-time.After(d):
	}
}

func snapshotKeys(evs []*registrarv1.EndpointEvent) map[endpoint.Key]bool {
	out := map[endpoint.Key]bool{}
	for _, ev := range evs {
		for _, p := range ev.GetEndpoints() {
			e, err := endpoint.FromProtoUnchecked(p)
			if err != nil {
				panic(err)
			}
			out[e.Key()] = true
		}
	}
	return out
}

func keyOf(p *registryv1.Endpoint) endpoint.Key {
	e, err := endpoint.FromProtoUnchecked(p)
	if err != nil {
		panic(err)
	}
	return e.Key()
}
