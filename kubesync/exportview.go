package kubesync

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/follow"
)

// view is export's copy of the selected registry endpoints, by service. It is fed
// from the registry's change feed (registry/follow) or, for a backend without
// one, by listing; each change queues the services it touched.
type view struct {
	selected func(endpoint.Endpoint) bool
	changed  func(svc string)

	mu    sync.Mutex
	bySvc map[string]map[endpoint.Key]endpoint.Endpoint

	// read is closed once the first complete read is in: until then an empty view
	// means "not known yet", not "no services", and nothing may be deleted on it.
	read     chan struct{}
	readOnce sync.Once
}

func newView(selected func(endpoint.Endpoint) bool, changed func(string)) *view {
	return &view{
		selected: selected, changed: changed,
		bySvc: map[string]map[endpoint.Key]endpoint.Endpoint{},
		read:  make(chan struct{}),
	}
}

// isRead reports whether the first complete read is in.
func (v *view) isRead() bool {
	select {
	case <-v.read:
		return true
	default:
		return false
	}
}

// replace takes a complete read of the registry and queues each service whose
// endpoints differ from what the view held.
func (v *view) replace(state map[endpoint.Key]endpoint.Endpoint) {
	next := map[string]map[endpoint.Key]endpoint.Endpoint{}
	for k, e := range state {
		if !v.selected(e) {
			continue
		}
		if next[k.Service] == nil {
			next[k.Service] = map[endpoint.Key]endpoint.Endpoint{}
		}
		next[k.Service][k] = e
	}
	v.mu.Lock()
	prev := v.bySvc
	v.bySvc = next
	v.mu.Unlock()
	v.readOnce.Do(func() { close(v.read) })
	for svc, eps := range next {
		if !maps.EqualFunc(prev[svc], eps, endpoint.Equal) {
			v.changed(svc)
		}
	}
	for svc := range prev {
		if _, ok := next[svc]; !ok {
			v.changed(svc)
		}
	}
}

// apply takes one change from the feed. An update that makes an endpoint
// unselected (its annotations changed) removes it.
func (v *view) apply(ev registry.Event) {
	k := ev.Endpoint.Key()
	keep := ev.Type != registry.Removed && v.selected(ev.Endpoint)
	v.mu.Lock()
	eps := v.bySvc[k.Service]
	_, held := eps[k]
	switch {
	case keep:
		if eps == nil {
			eps = map[endpoint.Key]endpoint.Endpoint{}
			v.bySvc[k.Service] = eps
		}
		eps[k] = ev.Endpoint
	case held:
		delete(eps, k)
		if len(eps) == 0 {
			delete(v.bySvc, k.Service)
		}
	}
	v.mu.Unlock()
	if keep || held {
		v.changed(k.Service)
	}
}

// endpoints returns a copy of svc's endpoints.
func (v *view) endpoints(svc string) []endpoint.Endpoint {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]endpoint.Endpoint, 0, len(v.bySvc[svc]))
	for _, e := range v.bySvc[svc] {
		out = append(out, e)
	}
	return out
}

// has reports whether svc has selected endpoints.
func (v *view) has(svc string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.bySvc[svc]) > 0
}

// services returns the names of the services with selected endpoints.
func (v *view) services() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]string, 0, len(v.bySvc))
	for svc := range v.bySvc {
		out = append(out, svc)
	}
	return out
}

// selector is the export selection: the service matches a pattern, and the entry
// is neither this cluster's own (with OnlyOtherClusters) nor one import wrote for
// this cluster, which would send a Kubernetes Service back to where it came from.
func selector(cluster string, cfg *ExportConfig) func(endpoint.Endpoint) bool {
	return func(e endpoint.Endpoint) bool {
		if e.Cluster == cluster && (cfg.OnlyOtherClusters || e.Annotations[AnnotationOrigin] == OriginKubernetes) {
			return false
		}
		return matchAny(cfg.Services, e.Service)
	}
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// registryFilter narrows the registry read to one service when the only pattern is
// a plain valid name; a glob cannot be a filter, so anything else reads all.
func registryFilter(patterns []string) endpoint.Filter {
	if len(patterns) == 1 && !strings.ContainsAny(patterns[0], `*?[\`) &&
		endpoint.ValidateName("service", patterns[0]) == nil {
		return endpoint.Filter{Service: patterns[0]}
	}
	return endpoint.Filter{}
}

// feed keeps v current from reg until ctx ends: its change feed when it has one,
// else a List every interval.
func feed(ctx context.Context, reg registry.Registry, f endpoint.Filter, interval time.Duration, v *view, log *slog.Logger, m *metrics) {
	if w, ok := reg.(registry.Watcher); ok {
		err := follow.Run(ctx, w, f, backoff.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}, follow.Handler{
			Synced:  v.replace,
			Changed: v.apply,
			Ended: func(err error, synced bool, wait time.Duration) {
				if wait > 0 {
					log.Warn("registry change feed ended, opening it again", "err", err, "synced", synced, "retry_in", wait)
				}
			},
		})
		if !errors.Is(err, registry.ErrNoWatch) {
			return
		}
	}
	log.Info("registry backend has no change feed: listing it instead", "interval", interval)
	poll(ctx, reg, f, interval, v, log, m)
}

// poll lists reg every interval and hands each complete read to v.
func poll(ctx context.Context, reg registry.Registry, f endpoint.Filter, interval time.Duration, v *view, log *slog.Logger, m *metrics) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, callTimeout)
		eps, err := reg.List(lctx, f)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			m.syncErrors.WithLabelValues(dirExport).Inc()
			log.Warn("listing the registry failed, will retry", "err", err, "retry_in", interval)
		default:
			state := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
			for _, e := range eps {
				state[e.Key()] = e
			}
			v.replace(state)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
