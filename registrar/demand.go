package registrar

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
)

// What a replica holds (Config.Hold).
const (
	// HoldAll: every endpoint of every cluster in the registry.
	HoldAll = "all"
	// HoldDemanded: the replica's own cluster, and of the other clusters only the
	// services that its scoped watchers ask for.
	HoldDemanded = "demanded"
)

// DefaultHoldGrace is how long a demanded service stays held once no watcher asks
// for it: an agent that reconnects, or the next pod of a rollout, finds it still
// there.
const DefaultHoldGrace = time.Minute

// demand holds, with --hold demanded, the services of other clusters that the
// replica's scoped watchers ask for: each has a syncer of its own (a backend read,
// then its change feed) from its first watcher until DefaultHoldGrace after its last.
// The first watcher of a service waits for its first read, so that its snapshot is
// whole; the ones after it find the service held.
type demand struct {
	r        *Registrar
	ctx      context.Context // Run's: the services' syncers end with it
	mu       sync.Mutex
	services map[string]*demanded
	// watchers maps each scoped watcher to the services it counts for.
	watchers map[*hub.Watcher]map[string]struct{}
}

// demanded is one held service of other clusters.
type demanded struct {
	watchers int
	idle     time.Time // since when no watcher asks for it; zero while one does
	y        *syncer
	stop     context.CancelFunc
	done     sync.WaitGroup // the syncer's loops
}

func newDemand(r *Registrar) *demand {
	return &demand{r: r, services: map[string]*demanded{}, watchers: map[*hub.Watcher]map[string]struct{}{}}
}

// scope is the keys a demanded service's syncer covers: the service's in other
// clusters (those the replica accepts writes for are the main syncer's).
func (d *demand) scope(service string) func(endpoint.Key) bool {
	return func(k endpoint.Key) bool { return k.Service == service && !d.r.cfg.accepts(k.Cluster) }
}

// holds reports whether f reads only what the replica holds: a cluster it accepts
// writes for, or a demanded service.
func (d *demand) holds(f endpoint.Filter) bool {
	if !endpoint.Any(f.Cluster) && d.r.cfg.accepts(f.Cluster) {
		return true
	}
	if endpoint.Any(f.Service) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.services[f.Service]
	return ok
}

// want makes w's services held, starting a syncer for each new one, and waits
// until each has been read (within the backend timeout). It replaces what w asked
// for before (a scoped stream's new set).
func (d *demand) want(ctx context.Context, w *hub.Watcher, services map[string]struct{}) error {
	var wait []*syncer
	d.mu.Lock()
	old := d.watchers[w]
	for s := range services {
		if _, ok := old[s]; ok {
			continue
		}
		wait = append(wait, d.add(s).y)
	}
	d.release(old, services)
	d.watchers[w] = services
	d.mu.Unlock()
	return d.await(ctx, wait)
}

// add counts one more watcher of service s, holding it if it is not. Callers hold
// d.mu.
func (d *demand) add(s string) *demanded {
	ds := d.services[s]
	if ds == nil {
		ds = d.start(s)
		d.services[s] = ds
	}
	ds.watchers++
	ds.idle = time.Time{}
	return ds
}

// release uncounts a watcher from the services in old that are not in keep.
// Callers hold d.mu.
func (d *demand) release(old, keep map[string]struct{}) {
	now := time.Now()
	for s := range old {
		if _, ok := keep[s]; ok {
			continue
		}
		if ds := d.services[s]; ds != nil {
			if ds.watchers--; ds.watchers == 0 {
				ds.idle = now
			}
		}
	}
}

// closed uncounts w, whose stream has ended.
func (d *demand) closed(w *hub.Watcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.watchers[w]; ok {
		delete(d.watchers, w)
		d.release(old, nil)
	}
}

// start begins holding service s: a syncer of its own, under Run's context.
func (d *demand) start(s string) *demanded {
	r := d.r
	ctx, cancel := context.WithCancel(d.ctx)
	y := r.newSyncer(endpoint.Filter{Service: s}, d.scope(s), false)
	y.log = r.log.With("service", s)
	ds := &demanded{y: y, stop: cancel}
	for _, loop := range []func(context.Context){y.pollLoop, y.watchLoop} {
		ds.done.Go(func() { loop(ctx) })
	}
	r.log.Info("holding a service of other clusters for its watchers", "service", s)
	return ds
}

// await waits for the first read of each of ys, at most the backend timeout.
func (d *demand) await(ctx context.Context, ys []*syncer) error {
	if len(ys) == 0 {
		return nil
	}
	t := time.NewTimer(d.r.cfg.BackendTimeout)
	defer t.Stop()
	for _, y := range ys {
		select {
		case <-y.loaded:
		case <-t.C:
			return status.Errorf(codes.Unavailable, "reading service %q from the registry took longer than %s", y.filter.Service, d.r.cfg.BackendTimeout)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-d.r.closing:
			return errShuttingDown
		}
	}
	return nil
}

// loop lets go, every tenth of the grace, of the services no watcher has asked
// for during the grace: their syncers stop and their entries leave the snapshot.
func (d *demand) loop(ctx context.Context) {
	every(ctx, d.r.cfg.HoldGrace/10, func() { d.letGo(time.Now()) })
}

func (d *demand) letGo(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock() // a watcher asking for s meanwhile finds it gone, and starts it again
	for s, ds := range d.services {
		if ds.watchers > 0 || now.Sub(ds.idle) < d.r.cfg.HoldGrace {
			continue
		}
		ds.stop()
		ds.done.Wait() // nothing of its feed is applied after the drop
		v := d.r.view
		v.EndFullIn(v.BeginFull(), nil, ds.y.scope)
		delete(d.services, s)
		d.r.log.Info("no watcher asks for a service of other clusters any more; let go", "service", s)
	}
}

// rescoped is told that w took a new set of services (hub.Config.Rescoped), on
// its sender, before its snapshot of them is taken: with --hold demanded, the new
// services are read first.
func (r *Registrar) rescoped(w *hub.Watcher) {
	r.noteScope(w) // inspect.go
	if r.demand == nil || w.Services == nil {
		return
	}
	if err := r.demand.want(w.Ctx, w, w.Services); err != nil {
		r.log.Warn("a watcher's new services could not all be read in time; their entries follow as changes", "watcher", w.ID, "err", err)
	}
}

// metrics registers the gauge of the services of other clusters held.
func (d *demand) metrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "registrar_demanded_services", Help: "Services of other clusters held because watchers ask for them (--hold demanded).",
	}, func() float64 { return float64(d.count()) }))
}

// count is how many services of other clusters are held.
func (d *demand) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.services)
}

// validHold checks Config.Hold.
func validHold(h string) error {
	switch h {
	case HoldAll, HoldDemanded:
		return nil
	}
	return fmt.Errorf("registrar: hold %q: want %q or %q", h, HoldAll, HoldDemanded)
}
