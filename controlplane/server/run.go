package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
)

const defaultStopTimeout = 5 * time.Second

// Run serves until ctx ends (returning nil) or a listener fails (returning its error),
// then shuts down. It may be called once.
func (s *Server) Run(ctx context.Context) error {
	err := errors.New("controlplane server: Run called twice")
	s.runOnce.Do(func() { err = s.run(ctx) })
	return err
}

func (s *Server) run(ctx context.Context) error {
	qctx, stopQueues := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	failed := make(chan error, 4)
	if s.ha != nil {
		workers.Go(func() { s.runHA(qctx, failed) }) // reconciles while elected
	} else {
		workers.Go(func() { s.links.Run(qctx) })
		workers.Go(func() { s.routes.Run(qctx) })
		workers.Go(func() {
			reconcile.Sweep(qctx, s.o.Config.Reconciler.ReconcilePeriod, s.streams.Nodes, s.links, s.routes)
		})
	}

	var serving sync.WaitGroup
	serve := func(name string, fn func() error) {
		serving.Go(func() {
			if err := fn(); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("listener failed", "listener", name, "err", err)
				failed <- err
			}
		})
	}
	serve("southbound", func() error { return s.sgrpc.Serve(s.slis) })
	serve("northbound", func() error { return s.ngrpc.Serve(s.nlis) })
	if s.http != nil {
		serve("metrics", func() error { return s.http.Serve(s.hlis) })
	}
	s.ready.Store(true)
	setHealth(s.health, healthpb.HealthCheckResponse_SERVING)
	s.log.Info("control plane serving", "mode", s.svc.Mode().String(), "southbound", s.SouthboundAddr(),
		"northbound", s.NorthboundAddr(), "metrics", s.MetricsAddr())

	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	s.shutdown()
	serving.Wait()
	stopQueues()
	workers.Wait()
	return errors.Join(err, s.closeResources())
}

// shutdown stops taking work: readiness goes, management calls drain, node streams
// end without counting as crashes.
func (s *Server) shutdown() {
	s.ready.Store(false)
	// Probes see NOT_SERVING while calls drain; Shutdown also holds it there.
	s.health.Shutdown()
	s.log.Info("control plane shutting down")
	timeout := s.o.StopTimeout
	if timeout <= 0 {
		timeout = defaultStopTimeout
	}
	grpcstop.Stop(s.ngrpc, timeout)
	s.south.Closing()
	s.sgrpc.Stop()
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_ = s.http.Shutdown(ctx)
	}
}

func (s *Server) closeResources() error {
	return errors.Join(s.auth.Close(), s.store.Close())
}
