package kubesync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// importer registers the ready endpoints of one namespace's EndpointSlices. Its
// key is a Service name: the registry service its endpoints are registered under.
type importer struct {
	cluster string
	ns      string
	ttl     endpoint.TTL
	reg     registry.Registry
	slices  discoverylisters.EndpointSliceNamespaceLister
	ctl     *controller
	notes   notes
	log     *slog.Logger
	m       *metrics

	// written is what the last successful sync of each service registered: what a
	// refresh renews, and what an endpoint leaving is unregistered from. Nothing
	// else in the registry is ever unregistered.
	mu      sync.Mutex
	written map[string]map[endpoint.Key]endpoint.Endpoint

	// failing is set by a registry write that failed and cleared by one that
	// worked; lastOK is when one last worked (or, if none has, when failing began).
	failing bool
	lastOK  time.Time
}

// importTimeout bounds one import sync, its registry write above all. Entries are
// refreshed every TTL/3: a write that hangs is given up by TTL/2, which leaves
// time to retry before the entries written last expire.
func importTimeout(ttl time.Duration) time.Duration { return ttl / 6 }

// wrote records how a registry write went, for failingFor.
func (i *importer) wrote(err error, now time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	switch {
	case err == nil:
		i.failing, i.lastOK = false, now
	case !i.failing:
		i.failing = true
		if i.lastOK.IsZero() {
			i.lastOK = now
		}
	}
}

// failingFor is how long ago a registry write last worked, if the last one
// failed; zero if it worked.
func (i *importer) failingFor(now time.Time) time.Duration {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.failing {
		return 0
	}
	return now.Sub(i.lastOK)
}

// onSlice queues the service of a slice that is not ours: ours hold what export
// took from the registry, and registering them would send it back.
func (i *importer) onSlice(obj any) {
	if s, ok := objectAs[*discoveryv1.EndpointSlice](obj); ok && !ownedSlice(s) {
		i.ctl.enqueue(sliceService(s))
	}
}

// refreshAll queues every service with registered entries, to renew their TTL.
func (i *importer) refreshAll() {
	i.mu.Lock()
	svcs := make([]string, 0, len(i.written))
	for svc := range i.written {
		svcs = append(svcs, svc)
	}
	i.mu.Unlock()
	for _, svc := range svcs {
		i.ctl.enqueue(svc)
	}
}

// resyncAll queues every service with slices, and every one with entries.
func (i *importer) resyncAll() {
	if all, err := i.slices.List(labels.Everything()); err == nil {
		for _, s := range all {
			i.onSlice(s)
		}
	}
	i.refreshAll()
}

// sync registers the service's ready endpoints (renewing their TTL) and
// unregisters those it registered before that are gone.
func (i *importer) sync(ctx context.Context, svc string) error {
	all, err := i.slices.List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc}))
	if err != nil {
		return fmt.Errorf("list EndpointSlices of %s: %w", svc, err)
	}
	theirs := all[:0:0]
	for _, s := range all {
		if !ownedSlice(s) {
			theirs = append(theirs, s)
		}
	}
	want, n := planImport(i.cluster, i.ns, svc, i.ttl, theirs)
	i.mu.Lock()
	prev := i.written[svc]
	i.mu.Unlock()
	ops, counts := importOps(prev, want)
	if len(ops) > 0 {
		err := i.reg.Apply(ctx, ops)
		i.wrote(err, time.Now())
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	i.mu.Lock()
	if len(want) == 0 {
		delete(i.written, svc)
	} else {
		i.written[svc] = want
	}
	i.mu.Unlock()
	for op, c := range counts {
		i.m.entries.WithLabelValues(op).Add(float64(c))
	}
	if counts[entryRegistered]+counts[entryUnregistered] > 0 {
		i.log.Info("registry updated", "service", svc, "registered", counts[entryRegistered], "unregistered", counts[entryUnregistered], "total", len(want))
	}
	i.report(svc, n)
	return nil
}

// importOps registers every wanted entry (renewing the TTL of the unchanged ones)
// and unregisters the ones written before that are no longer wanted.
func importOps(prev, want map[endpoint.Key]endpoint.Endpoint) ([]registry.Op, map[string]int) {
	counts := map[string]int{}
	ops := make([]registry.Op, 0, len(want)+len(prev))
	for k, e := range want {
		if p, ok := prev[k]; ok && endpoint.Equal(p, e) {
			counts[entryRefreshed]++
		} else {
			counts[entryRegistered]++
		}
		ops = append(ops, registry.Register(e))
	}
	for k, e := range prev {
		if _, ok := want[k]; !ok {
			ops = append(ops, registry.Unregister(e))
			counts[entryUnregistered]++
		}
	}
	return ops, counts
}

// report logs and counts the notes of svc not reported before.
func (i *importer) report(svc string, n []note) {
	for _, f := range i.notes.replace(svc, n) {
		i.m.skipped.WithLabelValues(dirImport, f.reason).Inc()
		i.log.Warn("not imported", "service", svc, "reason", f.reason, "detail", f.detail)
	}
}

// planImport is the registry entries for one Service's slices: one per ready
// address × port. An entry endpoint.Validate refuses is left out with a note, so
// nothing invalid reaches a batch (which would fail whole).
func planImport(cluster, ns, svc string, ttl endpoint.TTL, slices []*discoveryv1.EndpointSlice) (map[endpoint.Key]endpoint.Endpoint, []note) {
	want := map[endpoint.Key]endpoint.Endpoint{}
	var n []note
	for _, s := range slices {
		switch {
		case s.AddressType == discoveryv1.AddressTypeFQDN:
			n = append(n, note{reason: reasonFQDN, detail: s.Name})
			continue
		case len(s.Ports) == 0 && anyReady(s.Endpoints):
			n = append(n, note{reason: reasonNoPort, detail: s.Name})
			continue
		}
		for _, p := range s.Ports {
			if p.Port == nil {
				n = append(n, note{reason: reasonNoPort, detail: s.Name + "/" + deref(p.Name)})
				continue
			}
			base := endpoint.Endpoint{
				Cluster: cluster, Service: svc, Protocol: importProtocol(p), Port: int(*p.Port),
				Priority: 1, TTL: ttl,
			}
			n = append(n, portEntries(base, ns, s.Endpoints, want)...)
		}
	}
	return want, n
}

// portEntries adds to want an entry like base for each ready address.
func portEntries(base endpoint.Endpoint, ns string, eps []discoveryv1.Endpoint, want map[endpoint.Key]endpoint.Endpoint) []note {
	var n []note
	for _, ep := range eps {
		health, ok := importHealth(ep)
		if !ok {
			continue
		}
		for _, a := range ep.Addresses {
			e := base
			e.Address, e.Node, e.Health, e.Zone = a, deref(ep.NodeName), health, importZone(ep)
			e.Annotations = map[string]string{
				AnnotationNamespace: ns, AnnotationService: base.Service, AnnotationOrigin: OriginKubernetes,
			}
			e.Normalize()
			if err := e.Validate(); err != nil {
				n = append(n, note{reason: reasonInvalidEndpoint, detail: e.Key().String() + ": " + err.Error()})
				continue
			}
			want[e.Key()] = e
		}
	}
	return n
}

// importHealth is the registry health of a slice endpoint, and whether it is imported
// at all. A terminating endpoint that still serves is draining: it finishes what it
// has while routers send it nothing new, as kube-proxy treats it. One that neither is
// ready nor serves is left out, as a failing entry is.
func importHealth(ep discoveryv1.Endpoint) (endpoint.Health, bool) {
	c := ep.Conditions
	switch {
	case ready(ep):
		return endpoint.Healthy, true
	case c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating:
		return endpoint.Draining, true
	}
	return 0, false
}

// importZone is the slice endpoint's zone when the registry can hold it as a name;
// any other zone is left out rather than the endpoint.
func importZone(ep discoveryv1.Endpoint) string {
	z := deref(ep.Zone)
	if z == "" || endpoint.ValidateName("zone", z) != nil {
		return ""
	}
	return z
}

// ready reads the endpoint's ready condition; unset means ready, as the API says
// consumers should take it.
func ready(ep discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

func anyReady(eps []discoveryv1.Endpoint) bool {
	for _, ep := range eps {
		if ready(ep) {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
