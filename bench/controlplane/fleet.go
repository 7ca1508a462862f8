package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// result is one run's timeline, each measured from the first node's start.
type result struct {
	lastRegistration time.Duration
	linksApplied     time.Duration // every link Applied and claimed
	routesApplied    time.Duration // every link and route Applied: converged
	links, routes    int
	verified         error // the datapaths checked against the store after convergence
}

// afterRegistration is the measure the goal is about.
func (r result) afterRegistration() time.Duration { return r.routesApplied - r.lastRegistration }

func (r result) String() string {
	v := "datapaths match the store"
	if r.verified != nil {
		v = "DATAPATH MISMATCH: " + r.verified.Error()
	}
	return fmt.Sprintf("last registration %s, links applied %s, all applied %s (%s after the last registration), %d links, %d routes; %s",
		r.lastRegistration.Round(time.Millisecond), r.linksApplied.Round(time.Millisecond), r.routesApplied.Round(time.Millisecond),
		r.afterRegistration().Round(time.Millisecond), r.links, r.routes, v)
}

func controlPlaneConfig(c options, dir string) (*config.Config, error) {
	cfg, err := config.Parse([]byte("topology:\n  links:\n    - group: " + groupName(0) + "\n      neighbors: ['*']\n"))
	if err != nil {
		return nil, err
	}
	cfg.Northbound.Endpoint, cfg.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Reconciler.Workers, cfg.Reconciler.BaseRetryDelay = c.workers, c.baseDelay
	cfg.Database = config.Database{Type: config.DatabaseInMemory}
	if c.store == "sqlite" {
		cfg.Database = config.Database{Type: config.DatabaseSQLite, Path: filepath.Join(dir, "cp.db")}
	}
	return cfg, nil
}

func groupName(i int) string { return fmt.Sprintf("g%03d", i) }

// once runs one fleet from an empty control plane to convergence.
func once(ctx context.Context, c options) (result, error) {
	dir, err := os.MkdirTemp("", "switchboard-cp-bench-")
	if err != nil {
		return result{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cfg, err := controlPlaneConfig(c, dir)
	if err != nil {
		return result{}, err
	}
	srv, err := server.New(ctx, server.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return result{}, err
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	stopped := false
	stopServer := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "control plane:", err)
			}
		}
	}
	defer stopServer()

	conns, err := dial(srv.SouthboundAddr(), c.conns)
	if err != nil {
		return result{}, err
	}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	f := cpharness.NewFabric()
	defer f.Close()
	// Runs before f.Close: the control plane stops first, so the nodes' streams ending
	// is not taken for a thousand crashes.
	defer stopServer()
	start := time.Now()
	last, err := startFleet(ctx, c, f, srv.SouthboundAddr(), conns)
	if err != nil {
		return result{}, err
	}
	r := result{lastRegistration: last.Sub(start)}
	if err := waitApplied(ctx, srv.Store(), c.groups, start, &r); err != nil {
		return r, err
	}
	r.verified = cpharness.Converged(ctx, srv.Store(), f, true)
	return r, nil
}

func dial(target string, n int) ([]*grpc.ClientConn, error) {
	var out []*grpc.ClientConn
	for range n {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		out = append(out, cc)
	}
	return out, nil
}

// startFleet starts every node at once, the first of each group announcing the name,
// and returns when the last one registered.
func startFleet(ctx context.Context, c options, f *cpharness.Fabric, target string, conns []*grpc.ClientConn) (time.Time, error) {
	name := dataplane.NewName("org", "bench", "svc")
	var (
		mu   sync.Mutex
		last time.Time
		wg   sync.WaitGroup
		errs = make(chan error, c.nodes)
	)
	for i := range c.nodes {
		nc := cpharness.NodeConfig{Group: groupName(i % c.groups), ID: fmt.Sprintf("n%03d", i/c.groups), Target: target,
			Backoff: dataplane.Backoff{Base: 100 * time.Millisecond, Max: time.Second, HealthyAfter: 10 * time.Second}, NoOpLog: true}
		if len(conns) > 0 {
			nc.Conn = conns[i%len(conns)]
		}
		n, err := f.Start(nc)
		if err != nil {
			return last, err
		}
		if i < c.groups {
			if err := n.Announce(name); err != nil {
				return last, err
			}
		}
		wg.Go(func() {
			if err := n.Controller().WaitRegistered(ctx); err != nil {
				errs <- fmt.Errorf("node %s: %w", n.ID(), err)
				return
			}
			now := time.Now()
			mu.Lock()
			if now.After(last) {
				last = now
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	return last, errors.Join(<-errs)
}

// waitApplied polls the store until the star's links (one per spoke) and routes (with
// every group announcing: an upward and a downward route per spoke, 2*(groups-1)) are
// all Applied.
func waitApplied(ctx context.Context, st store.Store, groups int, start time.Time, r *result) error {
	wantLinks, wantRoutes := groups-1, 2*(groups-1)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		links, routes, err := applied(ctx, st)
		if err != nil {
			return err
		}
		r.links, r.routes = links, routes
		if links == wantLinks && r.linksApplied == 0 {
			r.linksApplied = time.Since(start)
		}
		if links == wantLinks && routes == wantRoutes {
			r.routesApplied = time.Since(start)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not converged: %d/%d links, %d/%d routes applied: %w", links, wantLinks, routes, wantRoutes, ctx.Err())
		case <-t.C:
		}
	}
}

// applied counts Applied, claimed links and Applied routes; -1 while anything else is
// pending, failed or waiting for deletion.
func applied(ctx context.Context, st store.Store) (int, int, error) {
	ls, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return 0, 0, err
	}
	rs, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return 0, 0, err
	}
	links, routes := 0, 0
	for _, l := range ls {
		if l.Status != store.LinkApplied || l.DestNodeID == "" {
			return -1, -1, nil
		}
		links++
	}
	for _, r := range rs {
		if r.IsTemplate() {
			continue
		}
		if r.Status != store.RouteApplied {
			return links, -1, nil
		}
		routes++
	}
	return links, routes, nil
}
