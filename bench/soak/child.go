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

// The child side: `soak child etcd|nats|registrar [flags]`. Each serves one thing,
// prints "ready <address>" once it does, logs to stderr (the parent appends it to a
// file), and ends when its stdin closes: the parent holds the other end, so a parent
// that dies, however it dies, takes its children with it.

func childMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "child: want etcd, nats or registrar")
		return 2
	}
	fs := flag.NewFlagSet("child "+args[0], flag.ContinueOnError)
	var c member
	fs.StringVar(&c.dir, "dir", "", "data directory (etcd, nats)")
	fs.IntVar(&c.port, "port", 0, "client port (etcd, nats)")
	fs.IntVar(&c.peerPort, "peer-port", 0, "peer port (etcd), route port (nats)")
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to serve on (etcd, nats)")
	fs.StringVar(&c.name, "name", "soak", "member name (etcd, nats)")
	fs.StringVar(&c.peers, "peers", "", "the cluster: name=host:peerport,... of every member, this one too (etcd, nats); empty: a cluster of one")
	backend := fs.String("backend", "", "registry backend name (registrar)")
	backendURL := fs.String("backend-url", "", "registry backend addresses, comma-separated (registrar)")
	replicas := fs.Int("replicas", 1, "stream replicas (registrar on jetstream)")
	proxied := fs.Bool("proxied", false, "reach each backend address through a proxy of its own, poisoned on orders read from stdin (registrar)")
	listen := fs.String("listen", "", "gRPC address (registrar)")
	healthListen := fs.String("health-listen", "", "HTTP address of /metrics, which the soak reads the held entries from (registrar); empty: none")
	livenessTTL := fs.Duration("liveness-ttl", 0, "hold agents' entries by their sessions, with this TTL (registrar); 0: off")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := newProxies()
	defer ps.close()
	go func() {
		// The parent writes only orders for the proxies; EOF means it closed the
		// pipe or died.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if err := ps.command(sc.Text()); err != nil {
				log.Error("order failed", "err", err)
			}
		}
		log.Info("stdin closed: stopping")
		cancel()
		// A graceful stop that hangs must not keep an orphan alive.
		time.AfterFunc(10*time.Second, func() { os.Exit(3) })
	}()
	var err error
	switch args[0] {
	case "etcd":
		err = runEtcd(ctx, log, c)
	case "nats":
		err = runNATS(ctx, log, c)
	case "registrar":
		urls := strings.Split(*backendURL, ",")
		if *proxied {
			if urls, err = proxyAll(ps, urls); err != nil {
				break
			}
		}
		err = runRegistrar(ctx, log, registrarChild{backend: *backend, urls: urls, replicas: *replicas,
			listen: *listen, healthListen: *healthListen, livenessTTL: *livenessTTL})
	default:
		err = fmt.Errorf("unknown child %q", args[0])
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("child failed", "err", err)
		return 1
	}
	return 0
}

// member is a backend member's flags.
type member struct {
	dir, host, name, peers string
	port, peerPort         int
}

// runEtcd serves one etcd member with fsync on, on fixed ports and a fixed data
// directory, so that a restart after SIGKILL recovers from the same WAL.
func runEtcd(ctx context.Context, log *slog.Logger, m member) error {
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(m.host, strconv.Itoa(m.port))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(m.host, strconv.Itoa(m.peerPort))}
	initial := m.name + "=" + peer.String()
	if m.peers != "" {
		var parts []string
		for _, p := range strings.Split(m.peers, ",") {
			name, addr, _ := strings.Cut(p, "=")
			parts = append(parts, name+"=http://"+addr)
		}
		initial = strings.Join(parts, ",")
	}
	scratch := filepath.Join(m.dir, "scratch") // embedetcd makes a directory per start here
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	c, err := embedetcd.Start(ctx, embedetcd.Options{Dir: scratch, Fsync: true, Configure: func(cfg *embed.Config) {
		cfg.Name = m.name
		cfg.Dir = filepath.Join(m.dir, "member")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = initial
		cfg.InitialClusterToken = "soak"
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

// runNATS serves one nats-server with JetStream (file storage) on a fixed port and
// store directory; with peers, a node of a JetStream cluster that tells clients of
// no other node, so that they keep to the URLs (the proxies) they were given.
func runNATS(ctx context.Context, log *slog.Logger, m member) error {
	o := embednats.Options{Name: m.name, Host: m.host, Port: m.port, StoreDir: m.dir, Logger: log.With("nats", "server"), StartTimeout: time.Minute}
	if m.peers != "" {
		co := &embednats.ClusterOptions{Name: "soak", Port: m.peerPort, NoAdvertise: true}
		for _, p := range strings.Split(m.peers, ",") {
			_, addr, _ := strings.Cut(p, "=")
			co.Routes = append(co.Routes, addr)
		}
		o.Cluster = co
	}
	s, err := embednats.Start(ctx, o)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	log.Info("nats serving", "url", s.ClientURL())
	fmt.Println("ready " + s.ClientURL())
	<-ctx.Done()
	return nil
}

// proxyAll puts a proxy of ps in front of each URL (scheme://host:port) and
// returns the URLs of the proxies.
func proxyAll(ps *proxies, urls []string) ([]string, error) {
	out := make([]string, len(urls))
	for i, u := range urls {
		scheme, addr, ok := strings.Cut(u, "://")
		if !ok {
			return nil, fmt.Errorf("backend URL %q: want scheme://host:port", u)
		}
		listen, err := ps.add("backend-"+strconv.Itoa(i), "127.0.0.1:0", addr)
		if err != nil {
			return nil, err
		}
		out[i] = scheme + "://" + listen
	}
	return out, nil
}

// registrarChild is a registrar child's flags.
type registrarChild struct {
	backend              string
	urls                 []string
	replicas             int
	listen, healthListen string
	livenessTTL          time.Duration
}

// params are the registry backend's parameters for the child's backend.
func (rc registrarChild) params() (map[string]string, error) {
	params := map[string]string{}
	switch rc.backend {
	case "etcd":
		params["etcd-endpoints"] = strings.Join(rc.urls, ",")
		params["etcd-dial-timeout"] = "3s"
	case "jetstream":
		params["nats-url"] = strings.Join(rc.urls, ",")
		params["replicas"] = strconv.Itoa(rc.replicas)
	default:
		return nil, fmt.Errorf("backend %q: want etcd or jetstream", rc.backend)
	}
	return params, nil
}

// serverConfig is the replica's configuration: the same a `switchboard registrar`
// with --liveness-ttl and --health-listen builds, over reg.
func (rc registrarChild) serverConfig(reg registry.Registry, log *slog.Logger) registrar.ServerConfig {
	return registrar.ServerConfig{Listen: rc.listen, HealthListen: rc.healthListen, NoUI: true, Registrar: registrar.Config{
		Cluster: "east", Backend: reg, Logger: log.With("component", "registrar"), LivenessTTL: rc.livenessTTL,
	}}
}

// runRegistrar serves one registrar replica of cluster "east". Opening the backend is
// retried: a replica restarted while the backend is down waits for it, as a pod
// restarted by its orchestrator would keep trying.
func runRegistrar(ctx context.Context, log *slog.Logger, rc registrarChild) error {
	params, err := rc.params()
	if err != nil {
		return err
	}
	var reg registry.Registry
	for {
		if reg, err = registry.Open(ctx, rc.backend, params, log.With("component", "backend")); err == nil {
			break
		}
		log.Warn("backend not available yet", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer reg.Close()
	srv, err := registrar.NewServer(rc.serverConfig(reg, log))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Registrar().Ready():
		log.Info("registrar ready", "addr", srv.Addr().String())
		fmt.Println("ready " + srv.Addr().String())
	case err := <-done:
		return err
	}
	return <-done
}
