package kubesync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Syncer runs the configured directions. Build it with New, run it once with Run,
// and ask Ready for /readyz meanwhile.
type Syncer struct {
	cfg       Config
	log       *slog.Logger
	m         *metrics
	factories map[string]informers.SharedInformerFactory // by namespace: one cache each
	synced    []cache.InformerSynced
	exp       *exporter
	imp       *importer
	ready     atomic.Bool // the informer caches are synced
}

// Run builds a Syncer from cfg and runs it until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// New checks cfg, fills in its defaults, registers the metrics and sets up the
// informers; nothing runs until Run.
func New(cfg Config) (*Syncer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Syncer{
		cfg: cfg, log: cfg.Logger.With("component", "kubesync", "cluster", cfg.Cluster),
		m: newMetrics(), factories: map[string]informers.SharedInformerFactory{},
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(s.m.collector()); err != nil {
			return nil, fmt.Errorf("kubesync: register metrics: %w", err)
		}
	}
	if cfg.Export != nil {
		if err := s.setUpExport(); err != nil {
			return nil, err
		}
	}
	if cfg.Import != nil {
		if err := s.setUpImport(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// factory returns the informer factory of ns. Export and import of one namespace
// share it, so they share one EndpointSlice cache and watch.
func (s *Syncer) factory(ns string) informers.SharedInformerFactory {
	f, ok := s.factories[ns]
	if !ok {
		// No informer resync: Run's own ticker resyncs, at any period (an
		// informer's is at least a second).
		f = informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0, informers.WithNamespace(ns))
		s.factories[ns] = f
	}
	return f
}

// watch registers h on inf and remembers when it has seen the initial list.
func (s *Syncer) watch(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return fmt.Errorf("kubesync: add event handler: %w", err)
	}
	s.synced = append(s.synced, reg.HasSynced)
	return nil
}

func (s *Syncer) setUpExport() error {
	ec := s.cfg.Export
	f := s.factory(ec.Namespace)
	svcs, slices := f.Core().V1().Services(), f.Discovery().V1().EndpointSlices()
	e := &exporter{
		ns: ec.Namespace, client: s.cfg.Client,
		services: svcs.Lister().Services(ec.Namespace), slices: slices.Lister().EndpointSlices(ec.Namespace),
		log: s.log.With("direction", dirExport, "namespace", ec.Namespace), m: s.m,
	}
	e.ctl = newController(dirExport, e.sync, 0, e.log, s.m) // each API call has its own bound
	e.view = newView(selector(s.cfg.Cluster, ec), e.ctl.enqueue)
	s.exp = e
	if err := s.watch(svcs.Informer(), handler(e.onService)); err != nil {
		return err
	}
	return s.watch(slices.Informer(), handler(e.onSlice))
}

func (s *Syncer) setUpImport() error {
	ic := s.cfg.Import
	slices := s.factory(ic.Namespace).Discovery().V1().EndpointSlices()
	i := &importer{
		cluster: s.cfg.Cluster, ns: ic.Namespace, ttl: endpoint.TTL(ic.TTL), reg: s.cfg.Registry,
		slices: slices.Lister().EndpointSlices(ic.Namespace),
		log:    s.log.With("direction", dirImport, "namespace", ic.Namespace), m: s.m,
		written: map[string]map[endpoint.Key]endpoint.Endpoint{},
	}
	i.ctl = newController(dirImport, i.sync, importTimeout(ic.TTL), i.log, s.m)
	s.imp = i
	return s.watch(slices.Informer(), handler(i.onSlice))
}

// Run syncs until ctx ends, then stops every goroutine it started and returns
// nil. Call it once. Errors along the way (the API server or the registry unreachable, a write
// refused) are logged, counted and retried with backoff.
func (s *Syncer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range s.controllers() {
		c.open()
	}
	defer s.stop(cancel, &wg)
	for _, f := range s.factories {
		f.StartWithContext(ctx)
	}
	if s.exp != nil {
		wg.Go(func() {
			feed(ctx, s.cfg.Registry, registryFilter(s.cfg.Export.Services), s.cfg.Export.PollInterval, s.exp.view, s.exp.log, s.m)
		})
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return nil // ctx ended first
	}
	s.ready.Store(true)
	s.log.Info("Kubernetes caches synced")
	if s.imp != nil {
		wg.Go(func() { s.imp.ctl.run(ctx) })
		wg.Go(func() { every(ctx, s.cfg.Import.TTL/3, s.imp.refreshAll) })
		wg.Go(func() { every(ctx, s.cfg.Resync, s.imp.resyncAll) })
	}
	if s.exp != nil {
		wg.Go(func() { s.runExport(ctx) })
	}
	<-ctx.Done()
	return nil
}

// runExport starts export's workers once the registry has been read whole: on an
// empty view before that, a sync would delete every Service it exported.
func (s *Syncer) runExport(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.exp.view.read:
	}
	s.log.Info("registry read: exporting", "services", len(s.exp.view.services()))
	// Also sync what the cache holds of ours: a registry service that went away
	// while no syncer ran has no change left to announce it.
	s.exp.resyncAll()
	var wg sync.WaitGroup
	wg.Go(func() { every(ctx, s.cfg.Resync, s.exp.resyncAll) })
	s.exp.ctl.run(ctx)
	wg.Wait()
}

// stop ends everything Run started and waits for it.
func (s *Syncer) stop(cancel context.CancelFunc, wg *sync.WaitGroup) {
	cancel()
	// A queue whose workers never started (ctx ended first) still has a
	// goroutine of its own until it is shut down.
	for _, c := range s.controllers() {
		c.queue.ShutDown()
	}
	wg.Wait()
	for _, f := range s.factories {
		f.Shutdown()
	}
}

func (s *Syncer) controllers() []*controller {
	var out []*controller
	if s.exp != nil {
		out = append(out, s.exp.ctl)
	}
	if s.imp != nil {
		out = append(out, s.imp.ctl)
	}
	return out
}

// Ready reports whether the syncer works from complete information and its
// work shows: the informer caches are synced; when exporting, the registry has
// been read whole; when importing, registry writes have not been failing for
// longer than the TTL (when the entries written last have expired). The reason
// says what is missing. It suits /readyz.
func (s *Syncer) Ready() (bool, string) {
	switch {
	case !s.ready.Load():
		return false, "Kubernetes informer caches not synced yet"
	case s.exp != nil && !s.exp.view.isRead():
		return false, "registry not read yet"
	}
	if s.imp != nil {
		if d := s.imp.failingFor(time.Now()); d > s.cfg.Import.TTL {
			return false, fmt.Sprintf("registry writes failing for %s, longer than the import TTL %s: the imported entries have expired",
				d.Round(time.Second), s.cfg.Import.TTL)
		}
	}
	return true, ""
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
