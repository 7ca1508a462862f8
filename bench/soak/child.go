package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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
	dir := fs.String("dir", "", "data directory (etcd, nats)")
	port := fs.Int("port", 0, "client port (etcd, nats)")
	peerPort := fs.Int("peer-port", 0, "peer port (etcd)")
	backend := fs.String("backend", "", "registry backend name (registrar)")
	backendURL := fs.String("backend-url", "", "registry backend address (registrar)")
	listen := fs.String("listen", "", "gRPC address (registrar)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// The parent never writes; EOF means it closed the pipe or died.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		log.Info("stdin closed: stopping")
		cancel()
		// A graceful stop that hangs must not keep an orphan alive.
		time.AfterFunc(10*time.Second, func() { os.Exit(3) })
	}()
	var err error
	switch args[0] {
	case "etcd":
		err = runEtcd(ctx, log, *dir, *port, *peerPort)
	case "nats":
		err = runNATS(ctx, log, *dir, *port)
	case "registrar":
		err = runRegistrar(ctx, log, *backend, *backendURL, *listen)
	default:
		err = fmt.Errorf("unknown child %q", args[0])
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("child failed", "err", err)
		return 1
	}
	return 0
}

// runEtcd serves one etcd member with fsync on, on fixed ports and a fixed data
// directory, so that a restart after SIGKILL recovers from the same WAL.
func runEtcd(ctx context.Context, log *slog.Logger, dir string, port, peerPort int) error {
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(peerPort)}
	scratch := filepath.Join(dir, "scratch") // embedetcd makes a directory per start here
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	c, err := embedetcd.Start(ctx, embedetcd.Options{Dir: scratch, Fsync: true, Configure: func(cfg *embed.Config) {
		cfg.Name = "soak"
		cfg.Dir = filepath.Join(dir, "member")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = "soak=" + peer.String()
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
// store directory.
func runNATS(ctx context.Context, log *slog.Logger, dir string, port int) error {
	s, err := embednats.Start(ctx, embednats.Options{Name: "soak", Host: "127.0.0.1", Port: port, StoreDir: dir, Logger: log.With("nats", "server")})
	if err != nil {
		return err
	}
	defer s.Shutdown()
	log.Info("nats serving", "url", s.ClientURL())
	fmt.Println("ready " + s.ClientURL())
	<-ctx.Done()
	return nil
}

// runRegistrar serves one registrar replica of cluster "east". Opening the backend is
// retried: a replica restarted while the backend is down waits for it, as a pod
// restarted by its orchestrator would keep trying.
func runRegistrar(ctx context.Context, log *slog.Logger, backend, backendURL, listen string) error {
	params := map[string]string{}
	switch backend {
	case "etcd":
		params["etcd-endpoints"] = backendURL
		params["etcd-dial-timeout"] = "3s"
	case "jetstream":
		params["nats-url"] = backendURL
	default:
		return fmt.Errorf("backend %q: want etcd or jetstream", backend)
	}
	var reg registry.Registry
	for {
		var err error
		if reg, err = registry.Open(ctx, backend, params, log.With("component", "backend")); err == nil {
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
	srv, err := registrar.NewServer(registrar.ServerConfig{Listen: listen, Registrar: registrar.Config{
		Cluster: "east", Backend: reg, Logger: log.With("component", "registrar"),
	}})
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
