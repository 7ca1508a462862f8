package client

import (
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// readCache is the view readers and watchers see: per service, the visible
// endpoints by key and, built lazily after a change, sorted; and all of them
// sorted. A read of a service is a map lookup returning a shared slice.
type readCache struct {
	svcs  map[string]*service
	all   []endpoint.Endpoint // sorted view of everything; valid when allOK
	allOK bool
}

type service struct {
	eps    map[endpoint.Key]endpoint.Endpoint
	sorted []endpoint.Endpoint
	ok     bool // sorted matches eps
}

// visible is what key k looks like to readers.
func (c *cache) visible(k endpoint.Key) (endpoint.Endpoint, bool) {
	if w := c.own[k]; w != nil && w.overlay {
		if w.op.Kind == registry.OpRegister {
			return w.op.Endpoint, true
		}
		return endpoint.Endpoint{}, false
	}
	e, ok := c.base[k]
	return e, ok
}

// refresh brings the view of k in line with visible and tells the watchers.
func (c *cache) refresh(k endpoint.Key) {
	want, ok := c.visible(k)
	s := c.svcs[k.Service]
	var cur endpoint.Endpoint
	had := false
	if s != nil {
		cur, had = s.eps[k]
	}
	var ev registry.EventType
	switch {
	case ok && !had:
		ev = registry.Added
	case ok && !endpoint.Equal(cur, want):
		ev = registry.Updated
	case !ok && had:
		ev = registry.Removed
	default:
		return
	}
	if s == nil {
		s = &service{eps: map[endpoint.Key]endpoint.Endpoint{}}
		c.svcs[k.Service] = s
	}
	if ok {
		s.eps[k] = want
	} else {
		delete(s.eps, k)
		want = cur
		if len(s.eps) == 0 {
			delete(c.svcs, k.Service)
		}
	}
	s.ok, c.allOK = false, false
	if c.ready {
		c.notify(registry.Event{Type: ev, Endpoint: want})
	}
}

// list returns the view matching f, sorted; ok is false before the first snapshot.
// The slice may be shared with the cache and other callers: it must not be modified.
func (c *cache) list(f endpoint.Filter) ([]endpoint.Endpoint, bool) {
	eps, ok := c.sorted(f.Service)
	if !ok || (endpoint.Any(f.Cluster) && endpoint.Any(f.Protocol) && endpoint.Any(f.Address)) {
		return eps, ok
	}
	f = f.Normalize()
	out := make([]endpoint.Endpoint, 0)
	for _, e := range eps {
		if f.Match(e) {
			out = append(out, e)
		}
	}
	return out, true
}

// sorted returns the sorted view of one service, or of all when name is a wildcard.
// The fast path takes only the read lock and allocates nothing.
func (c *cache) sorted(name string) ([]endpoint.Endpoint, bool) {
	all := endpoint.Any(name)
	f := endpoint.Filter{Service: name}
	c.mu.RLock()
	if !c.ready || !covers(c.covered, f) {
		c.mu.RUnlock()
		return nil, false
	}
	if all && c.allOK {
		out := c.all
		c.mu.RUnlock()
		return out, true
	}
	if !all {
		s := c.svcs[name]
		if s == nil || s.ok {
			var out []endpoint.Endpoint
			if s != nil {
				out = s.sorted
			}
			c.mu.RUnlock()
			return out, true
		}
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !covers(c.covered, f) { // the set shrank meanwhile
		return nil, false
	}
	if all {
		if !c.allOK {
			n := 0
			for _, s := range c.svcs {
				n += len(s.eps)
			}
			c.all = make([]endpoint.Endpoint, 0, n)
			for _, s := range c.svcs {
				for _, e := range s.eps {
					c.all = append(c.all, e)
				}
			}
			endpoint.Sort(c.all)
			c.allOK = true
		}
		return c.all, true
	}
	s := c.svcs[name]
	if s == nil {
		return nil, true
	}
	if !s.ok {
		// A new slice every time: callers may still hold the old one.
		s.sorted = make([]endpoint.Endpoint, 0, len(s.eps))
		for _, e := range s.eps {
			s.sorted = append(s.sorted, e)
		}
		endpoint.Sort(s.sorted)
		s.ok = true
	}
	return s.sorted, true
}

// overlaid applies this client's overlaid writes to a list read from the registrar;
// the registry.Front filters and sorts the result, as it does every driver's List.
func (c *cache) overlaid(eps []endpoint.Endpoint) []endpoint.Endpoint {
	c.mu.RLock()
	byKey := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
	for _, e := range eps {
		byKey[e.Key()] = e
	}
	for k, w := range c.own {
		if !w.overlay {
			continue
		}
		if w.op.Kind == registry.OpRegister {
			byKey[k] = w.op.Endpoint
		} else {
			delete(byKey, k)
		}
	}
	c.mu.RUnlock()
	out := make([]endpoint.Endpoint, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, e)
	}
	return out
}
