package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Config is everything `switchboard agent` runs.
type Config struct {
	// Manifest lists the entries to register; nil registers nothing.
	Manifest *manifest.Manifest
	// ManifestPath is read again on each Reload signal.
	ManifestPath string
	// Registry is the backend; nil runs the no-op publisher and allows no outputs.
	Registry registry.Registry
	// Outputs are kept current from the registry.
	Outputs []Output
	// Servers are fed like Outputs and serve their clients while Run runs; a server
	// that is a prometheus.Collector exports its series on the agent's /metrics.
	Servers []Server
	// Sources feed the agent entries beside the manifest (the node's pods): each is
	// made with the agent it feeds and the registry of the agent's metrics, and runs
	// as long as the agent does.
	Sources []NewSource
	// Agent options; Publisher, Logger and Metrics are filled in by Run.
	Agent     Options
	Discovery DiscoveryOptions
	// HTTP, when set, serves /metrics, /healthz and /readyz, and the agent's page
	// at /ui unless UI.Disabled; Run closes it.
	HTTP net.Listener
	UI   UIOptions
	// Reload makes Run load ManifestPath again and re-render the outputs (SIGHUP).
	Reload <-chan struct{}
	Logger *slog.Logger
}

// Source is a component that keeps one of the agent's sources current (SetSource).
type Source interface {
	Run(ctx context.Context) error
	// Ready says, for /readyz, whether the source knows what to feed.
	Ready() (bool, string)
}

// NewSource makes a Source that feeds a.
type NewSource func(a *Agent, metrics prometheus.Registerer) (Source, error)

// Run runs the agent until ctx ends: it publishes the manifest's entries through the
// publish gate, keeps the outputs current, and serves metrics. On the way out it
// drains what it registered (Options.DrainGrace), then removes it.
func Run(ctx context.Context, cfg Config) error {
	outputs := slices.Clip(cfg.Outputs)
	for _, s := range cfg.Servers {
		outputs = append(outputs, s)
	}
	if cfg.Registry == nil && len(outputs) > 0 {
		return errors.New("rendered outputs and discovery servers read the registry: a registry backend is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c, ok := cfg.Registry.(prometheus.Collector); ok {
		// A backend with series of its own (the registrar client's cache age and
		// reconnects) exports them on the agent's /metrics.
		reg.MustRegister(c)
	}
	for _, s := range cfg.Servers {
		if c, ok := s.(prometheus.Collector); ok {
			reg.MustRegister(c)
		}
	}
	metrics := NewMetrics(reg)

	ao := cfg.Agent
	ao.Logger, ao.Metrics = log, metrics
	if cfg.Registry != nil {
		ao.Publisher = cfg.Registry
	}
	ag := New(cfg.Manifest, ao)
	sources := make([]Source, 0, len(cfg.Sources))
	for _, ns := range cfg.Sources {
		src, err := ns(ag, reg)
		if err != nil {
			return err
		}
		sources = append(sources, src)
	}
	var disc *Discovery
	if len(outputs) > 0 {
		do := cfg.Discovery
		do.Logger, do.Metrics = log, metrics
		disc = NewDiscovery(cfg.Registry, outputs, do)
		disc.changes = &ag.changes // renders change the agent's page
	}

	// The agent's loop and its sources stop with ctx: the loop then drains and
	// removes its entries. What serves others (/readyz and /metrics, the page, the
	// outputs and discovery servers) stops only once it has, so that /readyz says it
	// drains, and this node's own xDS and DNS clients see its entries drain and go.
	runCtx, cancelRun := context.WithCancel(ctx)
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	cancel := func() { cancelRun(); stopServing() } // a failure stops everything
	defer cancel()
	var g group
	g.spawn(cancel, func() error { defer stopServing(); return ag.Run(runCtx) })
	if disc != nil {
		g.spawn(cancel, func() error { return disc.Run(serveCtx) })
	}
	for _, s := range cfg.Servers {
		g.spawn(cancel, func() error { return s.Serve(serveCtx) })
	}
	for _, s := range sources {
		g.spawn(cancel, func() error { return s.Run(runCtx) })
	}
	if cfg.HTTP != nil {
		ready := readiness(ag, disc, sources)
		h := withUI(serveCtx, &g, cancel, cfg, ag, disc, ready, Handler(reg, ready))
		g.spawn(cancel, func() error { return serve(serveCtx, cfg.HTTP, h) })
	}
	if cfg.Reload != nil {
		g.spawn(cancel, func() error { reloadLoop(runCtx, cfg, ag, disc, log); return nil })
	}
	return g.wait()
}

// readiness is the agent's /readyz: its own Ready, its sources', then, with outputs
// or servers, a first complete copy of the registry.
func readiness(ag *Agent, disc *Discovery, sources []Source) func() (bool, string) {
	return func() (bool, string) {
		if ok, why := ag.Ready(); !ok {
			return false, why
		}
		for _, s := range sources {
			if ok, why := s.Ready(); !ok {
				return false, why
			}
		}
		if disc != nil {
			select {
			case <-disc.Ready():
			default:
				return false, "registry: the first copy for the outputs and servers is not complete"
			}
		}
		return true, ""
	}
}

func reloadLoop(ctx context.Context, cfg Config, ag *Agent, disc *Discovery, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-cfg.Reload:
		}
		log.Info("reloading")
		if cfg.ManifestPath != "" {
			if m, err := manifest.Load(cfg.ManifestPath); err != nil {
				ag.ReloadFailed(err)
			} else {
				ag.Reload(m)
			}
		}
		if disc != nil {
			disc.Trigger()
		}
	}
}

func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}

// group runs goroutines, cancels the rest when one fails, and returns the first error.
type group struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *group) spawn(cancel context.CancelFunc, fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.once.Do(func() { g.err = err; cancel() })
		}
	}()
}

func (g *group) wait() error {
	g.wg.Wait()
	return g.err
}
