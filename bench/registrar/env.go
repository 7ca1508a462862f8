package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/etcd"
)

// env is one etcd server for the scenarios: embedded in the bench's process, or
// with -etcd-process a process of its own.
type env struct {
	etcd      *embedetcd.Cluster // nil with -etcd-process
	proc      *etcdProcess       // nil without
	endpoints []string
	dir       string
	prefix    string
	n         int // backends opened, for distinct prefixes per scenario
}

func newEnv(ctx context.Context, fsync, process bool) (*env, error) {
	dir, err := os.MkdirTemp("", "registrar-bench")
	if err != nil {
		return nil, err
	}
	if process {
		p, err := startEtcdProcess(ctx, dir, fsync)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("etcd process: %w", err)
		}
		return &env{proc: p, endpoints: []string{p.endpoint}, dir: dir}, nil
	}
	c, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, Fsync: fsync})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	return &env{etcd: c, endpoints: c.Endpoints(), dir: dir}, nil
}

func (e *env) close() {
	if e.proc != nil {
		e.proc.stop()
	} else {
		_ = e.etcd.Close()
	}
	_ = os.RemoveAll(e.dir)
}

// benchProcess says what the bench's own process holds.
func (e *env) benchProcess() string {
	if e.proc != nil {
		return "registrar + bench"
	}
	return "registrar + embedded etcd + bench"
}

// etcdRequests is the number of gRPC messages etcd has received: its own
// grpc-prometheus series, from the process's /metrics or, embedded, the default
// registry.
func (e *env) etcdRequests() float64 {
	if e.proc != nil {
		n, err := e.proc.requests()
		if err != nil {
			log.Printf("etcd requests: %v", err)
		}
		return n
	}
	return embeddedEtcdRequests()
}

// revision is the etcd store's revision, from a read's response header: every
// transaction that changes keys adds one, so its difference over a burst counts the
// backend's transactions as etcd saw them.
func (e *env) revision(ctx context.Context) (int64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer closeQuietly(cli)
	resp, err := cli.Get(ctx, "/bench/revision-probe")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// scenario starts a fresh key prefix, so scenarios do not see each other's data.
func (e *env) scenario(name string) {
	e.n++
	e.prefix = fmt.Sprintf("/bench/%d-%s/", e.n, name)
}

// backend opens an etcd client on the current prefix: one connection.
func (e *env) backend(ctx context.Context) (*registry.Front, error) {
	return etcd.New(ctx, etcd.Options{Endpoints: e.endpoints, Prefix: e.prefix, DialTimeout: 10 * time.Second})
}

// preload writes n endpoints of service "bulk" straight to the backend.
func preload(ctx context.Context, r registry.Registry, n int) error {
	const chunk = 5000
	for i := 0; i < n; i += chunk {
		ops := make([]registry.Op, 0, chunk)
		for j := i; j < min(n, i+chunk); j++ {
			ops = append(ops, registry.Register(bulkEndpoint(j)))
		}
		if err := r.Apply(ctx, ops); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	return nil
}

func bulkEndpoint(i int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "east", Service: fmt.Sprintf("svc%d", i%100), Protocol: "http",
		Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Node: fmt.Sprintf("node-%d", i%500), Priority: 1}
}

// server is a registrar on 127.0.0.1:0 over a backend.
type server struct {
	*registrar.Server
	metrics *prometheus.Registry
	stop    func()
}

func startRegistrar(backend registry.Registry, tune func(*registrar.Config)) (*server, error) {
	return startRegistrarAt("127.0.0.1:0", backend, tune)
}

// startRegistrarAt is startRegistrar listening on listen.
func startRegistrarAt(listen string, backend registry.Registry, tune func(*registrar.Config)) (*server, error) {
	cfg := registrar.Config{Cluster: "east", Backend: backend, Logger: slog.New(slog.DiscardHandler), SyncInterval: syncInterval, BackstopInterval: syncInterval}
	if tune != nil {
		tune(&cfg)
	}
	metrics := prometheus.NewRegistry()
	// The health port with /debug/memory: the memory scenario reads the
	// registrar's heap and stacks from it, as an operator would.
	s, err := registrar.NewServer(registrar.ServerConfig{Registrar: cfg, Listen: listen, Metrics: metrics,
		HealthListen: "127.0.0.1:0", DebugMemory: true, GRPCOptions: transport.serverOptions()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Registrar().Ready():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("registrar stopped before ready: %w", err)
	case <-time.After(5 * time.Minute):
		cancel()
		return nil, fmt.Errorf("registrar not ready after 5m")
	}
	stop := sync.OnceFunc(func() { // the restart scenario stops its first registrar early
		cancel()
		if err := <-done; err != nil {
			log.Printf("registrar stopped: %v", err)
		}
	})
	return &server{Server: s, metrics: metrics, stop: stop}, nil
}

// closeQuietly closes what a scenario opened; the scenario's result is already in.
func closeQuietly(c io.Closer) { _ = c.Close() }

// preloaded starts a scenario: a fresh backend holding n endpoints and a registrar over
// it. stop releases both.
func (e *env) preloaded(ctx context.Context, name string, n int) (srv *server, stop func(), err error) {
	e.scenario(name)
	b, err := e.backend(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := preload(ctx, b, n); err != nil {
		closeQuietly(b)
		return nil, nil, err
	}
	if srv, err = startRegistrar(b, nil); err != nil {
		closeQuietly(b)
		return nil, nil, err
	}
	return srv, func() { srv.stop(); closeQuietly(b) }, nil
}

// counting wraps a backend and counts Apply calls and the ops they carried; it keeps
// the change feed.
type counting struct {
	registry.Registry
	applies atomic.Int64
	ops     atomic.Int64
	lastOK  atomic.Int64 // unix nanos of the last successful Apply
}

func (c *counting) Apply(ctx context.Context, ops []registry.Op) error {
	c.applies.Add(1)
	err := c.Registry.Apply(ctx, ops)
	if err == nil {
		c.ops.Add(int64(len(ops)))
		c.lastOK.Store(time.Now().UnixNano())
	}
	return err
}

func (c *counting) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return c.Registry.(registry.Watcher).Watch(ctx, f)
}
