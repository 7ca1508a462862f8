package agent

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// When every output says which services it needs (Demander), the agent reads only
// those: its view of the registry is the union of the demands, one backend watch
// per service. Over a scoped registrar client (--registrar-scoped) that makes the
// registrar send only those services, so an agent that serves ten services of a
// large fleet holds ten services. One output that needs everything (a template, a
// file_sd file, DNS) widens the view to the whole registry.

// demandView is the registry narrowed to the services demanded. It has the
// registry's Apply and Close; List and Watch see only the demanded services.
type demandView struct {
	registry.Registry
	demanders []Demander
	changed   chan struct{} // the union of the demanders' DemandChanged
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

// narrowed returns src narrowed to the demand of outputs, or src itself when some
// output needs every service; release stops following the demand.
func narrowed(src registry.Registry, outputs []Output) (view registry.Registry, release func()) {
	var ds []Demander
	for _, o := range outputs {
		d, ok := o.(Demander)
		if !ok {
			return src, func() {}
		}
		ds = append(ds, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &demandView{Registry: src, demanders: ds, changed: make(chan struct{}, 1), stop: cancel}
	for _, d := range ds {
		ch := d.DemandChanged()
		if ch == nil {
			continue
		}
		v.wg.Add(1)
		go func() {
			defer v.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					v.poke()
				}
			}
		}()
	}
	return v, func() { cancel(); v.wg.Wait() }
}

func (v *demandView) poke() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// demand is the union of the demands; nil when every service is needed.
func (v *demandView) demand() map[string]struct{} {
	set := map[string]struct{}{}
	for _, d := range v.demanders {
		services, all := d.Demand()
		if all {
			return nil
		}
		for _, s := range services {
			set[s] = struct{}{}
		}
	}
	return set
}

// List lists each demanded service the filter allows.
func (v *demandView) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	set := v.demand()
	if set == nil {
		return v.Registry.List(ctx, f)
	}
	var out []endpoint.Endpoint
	for _, s := range slices.Sorted(maps.Keys(set)) {
		if !endpoint.Any(f.Service) && f.Service != s {
			continue
		}
		g := f
		g.Service = s
		eps, err := v.Registry.List(ctx, g)
		if err != nil {
			return nil, err
		}
		out = append(out, eps...)
	}
	endpoint.Sort(out)
	return out, nil
}

// Watch follows the demanded services: one watch of the backend per service (or
// one of everything), changed as the demand changes without ending the stream. A
// service that joins is sent once its own initial state is whole; one that leaves
// is sent as the removal of each of its endpoints.
func (v *demandView) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	w, ok := v.Registry.(registry.Watcher)
	if !ok {
		return nil, registry.ErrNoWatch
	}
	m := &merge{src: w, filter: f, out: make(chan registry.Event, 64), subs: map[string]*sub{}, events: make(chan subEvent), ctx: ctx}
	if err := m.follow(v.demand()); err != nil {
		m.closeAll()
		return nil, err
	}
	go m.run(v.changed, v.demand)
	return m.out, nil
}

// merge is one Watch of a demandView: a backend watch per service (key "" for a
// watch of everything), relayed into one stream.
type merge struct {
	src    registry.Watcher
	filter endpoint.Filter
	ctx    context.Context
	out    chan registry.Event
	subs   map[string]*sub
	events chan subEvent
	synced bool // the merged stream has sent its Synced
}

// sub is one backend watch: the endpoints relayed from it, and the ones held back
// until its own Synced.
type sub struct {
	cancel  context.CancelFunc
	sent    map[endpoint.Key]endpoint.Endpoint
	pending []registry.Event
	synced  bool
}

type subEvent struct {
	service string
	s       *sub
	ev      registry.Event
	closed  bool
}

// follow opens and closes backend watches until they match set (nil: everything).
func (m *merge) follow(set map[string]struct{}) error {
	want := map[string]struct{}{"": {}}
	if set != nil {
		want = set
	}
	for key, s := range m.subs {
		if _, ok := want[key]; !ok {
			m.drop(key, s)
		}
	}
	for key := range want {
		if _, ok := m.subs[key]; ok || (key != "" && !endpoint.Any(m.filter.Service) && m.filter.Service != key) {
			continue
		}
		if err := m.open(key); err != nil {
			return err
		}
	}
	return nil
}

func (m *merge) open(key string) error {
	f := m.filter
	if key != "" {
		f.Service = key
	}
	ctx, cancel := context.WithCancel(m.ctx)
	ch, err := m.src.Watch(ctx, f)
	if err != nil {
		cancel()
		return err
	}
	s := &sub{cancel: cancel, sent: map[endpoint.Key]endpoint.Endpoint{}}
	m.subs[key] = s
	go func() {
		for ev := range ch {
			select {
			case m.events <- subEvent{service: key, s: s, ev: ev}:
			case <-ctx.Done():
			}
		}
		// Only a watch the backend ended is reported: one ended here is
		// cancelled, and nobody may be reading any more.
		select {
		case m.events <- subEvent{service: key, s: s, closed: true}:
		case <-ctx.Done():
		}
	}()
	return nil
}

// drop ends the watch of a service that left the demand and removes what it sent.
func (m *merge) drop(key string, s *sub) {
	s.cancel()
	delete(m.subs, key)
	for _, e := range s.sent {
		m.send(registry.Event{Type: registry.Removed, Endpoint: e})
	}
}

func (m *merge) closeAll() {
	for _, s := range m.subs {
		s.cancel()
	}
}

// run relays until ctx ends or a backend watch ends, which ends the merged watch
// (the mirror opens it again).
func (m *merge) run(changed <-chan struct{}, demand func() map[string]struct{}) {
	defer close(m.out)
	defer m.closeAll()
	m.trySynced()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-changed:
			if err := m.follow(demand()); err != nil {
				return
			}
			m.trySynced()
		case se := <-m.events:
			if m.subs[se.service] != se.s {
				continue // from a watch already dropped
			}
			if se.closed {
				return
			}
			m.relay(se.s, se.ev)
		}
	}
}

// relay passes one backend event on: held back while its watch is in its initial
// state after the merged stream synced, so a joining service appears whole.
func (m *merge) relay(s *sub, ev registry.Event) {
	if ev.Type == registry.Synced {
		s.synced = true
		for _, p := range s.pending {
			m.pass(s, p)
		}
		s.pending = nil
		m.trySynced()
		return
	}
	if !s.synced && m.synced {
		s.pending = append(s.pending, ev)
		return
	}
	m.pass(s, ev)
}

func (m *merge) pass(s *sub, ev registry.Event) {
	k := ev.Endpoint.Key()
	if ev.Type == registry.Removed {
		delete(s.sent, k)
	} else {
		s.sent[k] = ev.Endpoint
	}
	m.send(ev)
}

// trySynced sends the merged Synced once every backend watch has synced.
func (m *merge) trySynced() {
	if m.synced {
		return
	}
	for _, s := range m.subs {
		if !s.synced {
			return
		}
	}
	m.synced = true
	m.send(registry.Event{Type: registry.Synced})
}

func (m *merge) send(ev registry.Event) {
	select {
	case m.out <- ev:
	case <-m.ctx.Done():
	}
}
