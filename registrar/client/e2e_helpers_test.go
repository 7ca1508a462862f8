package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/etcd"
)

// etcdEnv is one embedded etcd server shared by a test's registrars. Each registrar
// opens its own etcd client, as separate processes would.
type etcdEnv struct {
	cluster *embedetcd.Cluster
	prefix  string
}

func newEtcd(t *testing.T) *etcdEnv {
	t.Helper()
	return &etcdEnv{cluster: embedetcd.New(t, embedetcd.Options{}), prefix: "/e2e/" + strings.ReplaceAll(t.Name(), "/", "_") + "/"}
}

func (e *etcdEnv) backend(t *testing.T) *registry.Front {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := etcd.New(ctx, etcd.Options{Endpoints: e.cluster.Endpoints(), Prefix: e.prefix, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// stored reads what etcd holds, through a fresh client.
func (e *etcdEnv) stored(t *testing.T) []string {
	t.Helper()
	return storedIn(t, func(ctx context.Context) (*registry.Front, error) {
		return etcd.New(ctx, etcd.Options{Endpoints: e.cluster.Endpoints(), Prefix: e.prefix, DialTimeout: 5 * time.Second})
	})
}

// storedIn lists, as keys, what the backend open opens holds, and closes it.
func storedIn(t *testing.T, open func(context.Context) (*registry.Front, error)) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	eps, err := r.List(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return keysOf(eps)
}

// runServerAt starts a registrar server on addr, retrying while a just-closed
// listener on the same port is still being released.
func runServerAt(t *testing.T, addr string, cfg registrar.Config) (*registrar.Server, func()) {
	t.Helper()
	var s *registrar.Server
	var err error
	sc := registrar.ServerConfig{Registrar: cfg, Listen: addr}
	sc.Metrics, _ = cfg.Metrics.(*prometheus.Registry) // the test's, if it set one
	for range 50 {
		if s, err = registrar.NewServer(sc); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Logf("registrar %s stopped: %v", s.Addr(), err)
		}
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return s, stop
}

// gate wraps a real backend and, while shut, fails every write as an outage would.
// It forwards the change feed, so the registrar still syncs through it.
type gate struct {
	registry.Registry
	shut atomic.Bool
}

func (g *gate) Apply(ctx context.Context, ops []registry.Op) error {
	if g.shut.Load() {
		return fmt.Errorf("%w: gate shut", registry.ErrUnavailable)
	}
	return g.Registry.Apply(ctx, ops)
}

func (g *gate) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return g.Registry.(registry.Watcher).Watch(ctx, f)
}

func addr(s *registrar.Server) string { return s.Addr().String() }

// slowWatch is a raw watch stream on its own connection with a small fixed window,
// which the test leaves unread so that it falls behind.
type slowWatch struct {
	stream registrarv1.Registrar_WatchEndpointsClient
}

func openSlowWatch(t *testing.T, address string) *slowWatch {
	t.Helper()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		conn.Close()
	})
	st, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Recv(); err != nil || ev.GetType() != registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
		t.Fatalf("slow watcher's first event: %v, %v", ev, err)
	}
	return &slowWatch{stream: st}
}

// readUntil reads until the stream's state holds n endpoints, and reports what it
// holds and whether it went through a resync (a full snapshot mid-stream).
func (w *slowWatch) readUntil(t *testing.T, n int, wait time.Duration) (int, bool) {
	t.Helper()
	state := map[endpoint.Key]bool{}
	var staged map[endpoint.Key]bool
	resynced := false
	deadline := time.Now().Add(wait)
	for len(state) != n || staged != nil {
		if time.Now().After(deadline) {
			return len(state), resynced
		}
		ev, err := w.stream.Recv()
		if err != nil {
			t.Fatalf("slow watcher: %v", err)
		}
		switch ev.GetType() {
		case registrarv1.EndpointEvent_FULL_SNAPSHOT:
			if staged == nil {
				staged = map[endpoint.Key]bool{}
			}
			for _, p := range ev.GetEndpoints() {
				staged[keyOf(p)] = true
			}
		case registrarv1.EndpointEvent_SNAPSHOT_COMPLETE:
			if staged != nil {
				state, staged, resynced = staged, nil, true
			}
		case registrarv1.EndpointEvent_ENDPOINT_ADDED:
			state[keyOf(ev.GetEndpoint())] = true
		case registrarv1.EndpointEvent_ENDPOINT_REMOVED:
			delete(state, keyOf(ev.GetEndpoint()))
		case registrarv1.EndpointEvent_BATCH:
			// It did not set accept_batches: a registrar that sends it batches
			// breaks every client written before them.
			t.Fatalf("slow watcher without accept_batches got a BATCH of %d events", len(ev.GetEvents()))
		}
	}
	return len(state), resynced
}

func keyOf(p *registryv1.Endpoint) endpoint.Key {
	e, err := endpoint.FromProtoUnchecked(p)
	if err != nil {
		panic(err)
	}
	return e.Key()
}
