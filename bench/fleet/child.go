package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
	_ "github.com/switchboard-mesh/switchboard/registry/etcd"      // the "etcd" backend
	_ "github.com/switchboard-mesh/switchboard/registry/jetstream" // the "jetstream" backend
)

// The child side: `fleet child etcd|nats|registrar|agents [flags]`. Each serves one
// thing, prints "ready <address>" once it does, logs to stderr (the parent appends it
// to a file) and ends when its stdin closes.

// childFlags are every child's flags; each kind reads the ones it needs.
type childFlags struct {
	dir, name, peers    string
	port, peerPort      int
	backend, backendURL string
	cluster, listen     string
	replicas            int
	livenessTTL         time.Duration
	hold                string
	agents              agentsConfig
}

func childMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "child: want etcd, nats, registrar or agents")
		return 2
	}
	fs := flag.NewFlagSet("child "+args[0], flag.ContinueOnError)
	var f childFlags
	fs.StringVar(&f.dir, "dir", "", "data directory (etcd, nats)")
	fs.StringVar(&f.name, "name", "", "member name (etcd, nats)")
	fs.StringVar(&f.peers, "peers", "", "every member as name=127.0.0.1:peerport, comma-separated (etcd, nats)")
	fs.IntVar(&f.port, "port", 0, "client port (etcd, nats)")
	fs.IntVar(&f.peerPort, "peer-port", 0, "peer port (etcd), route port (nats)")
	fs.StringVar(&f.backend, "backend", "", "registry backend: etcd or jetstream (registrar)")
	fs.StringVar(&f.backendURL, "backend-url", "", "backend client URLs, comma-separated (registrar)")
	fs.IntVar(&f.replicas, "replicas", 3, "registry stream replicas (registrar on jetstream)")
	fs.StringVar(&f.cluster, "cluster", "", "the cluster the registrar serves (registrar, agents)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:0", "gRPC address (registrar)")
	fs.DurationVar(&f.livenessTTL, "liveness-ttl", 0, "keep agents' entries alive by their sessions, 0: off (registrar)")
	fs.StringVar(&f.hold, "hold", "all", "what the registrar keeps: all or demanded (registrar)")
	f.agents.flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orders := make(chan string, 64)
	go readOrders(log, cancel, orders)
	var err error
	switch args[0] {
	case "etcd":
		err = runEtcd(ctx, log, f)
	case "nats":
		err = runNATS(ctx, log, f)
	case "registrar":
		err = runRegistrar(ctx, log, f)
	case "agents":
		f.agents.cluster = f.cluster
		err = runAgents(ctx, log, f.agents, orders)
	default:
		err = fmt.Errorf("unknown child %q", args[0])
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("child failed", "err", err)
		return 1
	}
	return 0
}

// readOrders passes stdin's lines to orders (only the agents child reads them) and
// cancels the child when stdin closes: the parent closed it, or died.
func readOrders(log *slog.Logger, cancel context.CancelFunc, orders chan<- string) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		select {
		case orders <- sc.Text():
		default:
			log.Warn("order dropped: this child takes no orders, or is behind", "order", sc.Text())
		}
	}
	log.Info("stdin closed: stopping")
	cancel()
	// A graceful stop that hangs must not leave an orphan.
	time.AfterFunc(10*time.Second, func() { os.Exit(3) })
}

// runEtcd serves one member of a 3-member etcd cluster, fsync on, as a production
// member would write.
func runEtcd(ctx context.Context, log *slog.Logger, f childFlags) error {
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(f.port))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(f.peerPort))}
	var initial []string
	for _, p := range strings.Split(f.peers, ",") {
		name, addr, _ := strings.Cut(p, "=")
		initial = append(initial, name+"=http://"+addr)
	}
	scratch := filepath.Join(f.dir, "scratch") // embedetcd makes a directory per start here
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	c, err := embedetcd.Start(ctx, embedetcd.Options{Dir: scratch, Fsync: true, Configure: func(cfg *embed.Config) {
		cfg.Name = f.name
		cfg.Dir = filepath.Join(f.dir, "member")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "fleet"
		// /metrics on the client URL: the parent reads etcd_mvcc_put_total there.
		cfg.Metrics = "basic"
	}})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	log.Info("etcd serving", "endpoint", client.String())
	fmt.Println("ready " + client.String())
	<-ctx.Done()
	return nil
}

// runNATS serves one node of a 3-node JetStream cluster (file storage).
func runNATS(ctx context.Context, log *slog.Logger, f childFlags) error {
	co := &embednats.ClusterOptions{Name: "fleet", Port: f.peerPort}
	for _, p := range strings.Split(f.peers, ",") {
		_, addr, _ := strings.Cut(p, "=")
		co.Routes = append(co.Routes, addr)
	}
	s, err := embednats.Start(ctx, embednats.Options{
		Name: f.name, Port: f.port, StoreDir: f.dir, Cluster: co,
		Logger: log.With("nats", f.name), StartTimeout: time.Minute,
	})
	if err != nil {
		return err
	}
	defer s.Shutdown()
	// A client that asks before the meta group has a leader can wait on its request
	// for as long as its context allows: say ready only once JetStream serves.
	for deadline := time.Now().Add(time.Minute); !s.JetStreamReady(); {
		if time.Now().After(deadline) {
			return errors.New("JetStream not current within 1m")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	log.Info("nats serving", "url", s.ClientURL())
	fmt.Println("ready " + s.ClientURL())
	<-ctx.Done()
	return nil
}

// backendParams are the registry parameters that reach the shared backend.
func backendParams(backend string, urls []string, replicas int) (map[string]string, error) {
	switch backend {
	case "etcd":
		return map[string]string{"etcd-endpoints": strings.Join(urls, ","), "etcd-dial-timeout": "3s"}, nil
	case "jetstream":
		return map[string]string{"nats-url": strings.Join(urls, ","), "replicas": strconv.Itoa(replicas)}, nil
	}
	return nil, fmt.Errorf("backend %q: want etcd or jetstream", backend)
}

// openBackend opens the registry, retrying until ctx ends: a JetStream cluster takes
// a while to elect the leader that creates the stream. Each attempt has 15 s: one
// made too early can wait on an answer that never comes.
func openBackend(ctx context.Context, log *slog.Logger, backend string, urls []string, replicas int) (registry.Registry, error) {
	params, err := backendParams(backend, urls, replicas)
	if err != nil {
		return nil, err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		reg, err := registry.Open(actx, backend, params, log)
		cancel()
		if err == nil {
			return reg, nil
		}
		log.Warn("backend not available yet", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runRegistrar serves one registrar replica of f.cluster.
func runRegistrar(ctx context.Context, log *slog.Logger, f childFlags) error {
	reg, err := openBackend(ctx, log.With("component", "backend"), f.backend, strings.Split(f.backendURL, ","), f.replicas)
	if err != nil {
		return err
	}
	defer reg.Close()
	srv, err := registrar.NewServer(registrar.ServerConfig{Listen: f.listen, Registrar: registrar.Config{
		Cluster: f.cluster, Backend: reg, LivenessTTL: f.livenessTTL, Hold: f.hold, Logger: log.With("component", "registrar"),
	}})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Registrar().Ready():
		log.Info("registrar ready", "addr", srv.Addr().String(), "cluster", f.cluster)
		fmt.Println("ready " + srv.Addr().String())
	case err := <-done:
		return err
	}
	return <-done
}
