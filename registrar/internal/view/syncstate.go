package view

import (
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// BeginFull marks the start of a full read of the backend (a List, or a watch's
// initial state) and returns the gen to hand to EndFull.
func (s *View) BeginFull() uint64 {
	s.mu.Lock()
	defer s.unlock()
	s.syncs[s.gen]++
	return s.gen
}

// AbortFull forgets a full read that failed.
func (s *View) AbortFull(start uint64) {
	s.mu.Lock()
	defer s.unlock()
	s.doneFull(start)
}

// EndFull replaces the backend view with a full read that began at gen start. Keys
// changed since start (by a watch event or a confirmed write) keep their newer value;
// pending writes stay overlaid, so nothing flaps.
func (s *View) EndFull(start uint64, eps []endpoint.Endpoint) { s.EndFullIn(start, eps, nil) }

// EndFullIn is EndFull for a read of part of the backend: the keys in scope (all of
// them when scope is nil). Keys outside it are left as they are, so that reads of
// several parts (a cluster, a service) each keep their own.
func (s *View) EndFullIn(start uint64, eps []endpoint.Endpoint, scope func(endpoint.Key) bool) {
	fresh := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
	for _, e := range eps {
		if k := e.Key(); scope == nil || scope(k) {
			fresh[k] = e
		}
	}
	s.mu.Lock()
	defer s.unlock()
	s.dropEchoesBefore(start, scope)
	for k := range s.backend {
		if scope != nil && !scope(k) {
			continue
		}
		if _, ok := fresh[k]; !ok && s.stamps[k] <= start {
			delete(s.backend, k)
			s.recompute(k)
		}
	}
	for k, e := range fresh {
		if s.stamps[k] > start {
			continue
		}
		if old, ok := s.backend[k]; ok && endpoint.Equal(old, e) {
			continue
		}
		s.backend[k] = e
		s.recompute(k)
	}
	s.doneFull(start)
}

// Ready is closed once the view holds a full read of the backend (MarkReady).
func (s *View) Ready() <-chan struct{} { return s.ready }

// MarkReady makes the view ready after its first full read: the snapshot is
// built first, and compressed, so that the watchers that arrive right after READY
// (a restarted replica's whole fleet) share it instead of waiting for it.
func (s *View) MarkReady() {
	s.mu.RLock()
	done := s.isReady
	s.mu.RUnlock()
	if done {
		return
	}
	s.Snapshot().Compressed()
	s.mu.Lock()
	defer s.unlock()
	if !s.isReady {
		s.isReady = true
		close(s.ready)
	}
}

// doneFull drops the record of a full read and the stamps no read in progress or to
// come can be older than.
func (s *View) doneFull(start uint64) {
	if s.syncs[start]--; s.syncs[start] <= 0 {
		delete(s.syncs, start)
	}
	floor := s.gen
	for g := range s.syncs {
		floor = min(floor, g)
	}
	for k, g := range s.stamps {
		if g <= floor {
			delete(s.stamps, k)
		}
	}
}

// Apply records one change from the backend's native watch.
func (s *View) Apply(ev registry.Event) {
	k := ev.Endpoint.Key()
	s.mu.Lock()
	defer s.unlock()
	if s.superseded(ev) {
		return // the backend view holds the later write already
	}
	s.gen++
	s.stamps[k] = s.gen
	switch ev.Type {
	case registry.Added, registry.Updated:
		s.backend[k] = ev.Endpoint
	case registry.Removed:
		delete(s.backend, k)
	default:
		return
	}
	s.recompute(k)
}
