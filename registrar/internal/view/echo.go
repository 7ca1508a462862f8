package view

import (
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Our own writes come back on the backend's change feed, and an echo can arrive
// after a later write to the same key was confirmed (the writer does not wait for
// the feed). Applied as news, the echo of a register confirmed before an
// unregister would bring the endpoint back until the unregister's echo follows:
// every watcher would see a removed endpoint return for a moment. So while the
// feed is live, the view remembers each write it hands to the backend, per key, and
// an event that matches one of them is that write's echo: the ones before it were
// delivered or coalesced away, and unless it is the last one remembered, a later
// write of ours, already in the backend view, supersedes it.
//
// An event that matches none is somebody else's write (another replica, an
// expiry) and applies as it arrives, as before.

// maxEchoes bounds the writes remembered per key: a backend that changed an
// endpoint on the way (so that its echo never matches) must not make them pile up.
const maxEchoes = 8

// echo is one write of ours whose echo the feed has not delivered yet.
type echo struct {
	op        registry.Op
	id        uint64 // the pend id of the write
	confirmed uint64 // the gen at which Apply confirmed it; 0 while in flight
}

// expectEcho remembers a write taken into a batch, while the feed is live.
func (s *View) expectEcho(k endpoint.Key, op registry.Op, id uint64) {
	if !s.feedLive {
		return
	}
	l := s.echoes[k]
	if len(l) == maxEchoes {
		l = l[1:]
	}
	s.echoes[k] = append(l, echo{op: op, id: id})
}

// echoConfirmed records that the write id to k is in the backend, at gen g.
func (s *View) echoConfirmed(k endpoint.Key, id, g uint64) {
	for i := range s.echoes[k] {
		if s.echoes[k][i].id == id {
			s.echoes[k][i].confirmed = g
		}
	}
}

// forgetEcho drops a write that was not written: no echo of it will come.
func (s *View) forgetEcho(k endpoint.Key, id uint64) {
	l := s.echoes[k]
	for i := range l {
		if l[i].id == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	s.setEchoes(k, l)
}

// superseded reports whether ev is the echo of a write of ours that a later one,
// already confirmed or in flight, replaces; it forgets the writes ev accounts for.
func (s *View) superseded(ev registry.Event) bool {
	k := ev.Endpoint.Key()
	l := s.echoes[k]
	for i := range l {
		if !echoes(ev, l[i].op) {
			continue
		}
		if l[i].confirmed == 0 { // the feed is ahead of the writer (backendDone)
			s.echoed[k] = max(s.echoed[k], l[i].id)
		}
		l = l[i+1:]
		s.setEchoes(k, l)
		return len(l) > 0
	}
	return false
}

// echoes reports whether ev is what the feed sends for op.
func echoes(ev registry.Event, op registry.Op) bool {
	switch ev.Type {
	case registry.Added, registry.Updated:
		return op.Kind == registry.OpRegister && endpoint.Equal(ev.Endpoint, op.Endpoint)
	case registry.Removed:
		return op.Kind == registry.OpUnregister
	}
	return false
}

func (s *View) setEchoes(k endpoint.Key, l []echo) {
	if len(l) == 0 {
		delete(s.echoes, k)
		return
	}
	s.echoes[k] = l
}

// dropEchoesBefore forgets the writes confirmed before a full read that began at
// gen start: it holds them, or what replaced them.
func (s *View) dropEchoesBefore(start uint64, scope func(endpoint.Key) bool) {
	for k, l := range s.echoes {
		if scope != nil && !scope(k) {
			continue // not in the read: it says nothing of this key's writes
		}
		kept := l[:0]
		for _, e := range l {
			if e.confirmed == 0 || e.confirmed > start {
				kept = append(kept, e)
			}
		}
		s.setEchoes(k, kept)
	}
}

// SetFeedLive starts or stops remembering writes. A feed that ends takes its
// pending echoes with it: the next one starts from a full read.
func (s *View) SetFeedLive(live bool) {
	s.mu.Lock()
	defer s.unlock()
	s.feedLive = live
	if !live {
		clear(s.echoes)
		clear(s.echoed)
	}
}

// backendDone records in the backend view a write of ours, id, that the backend
// took, unless the feed delivered its echo first (or a later write's of ours): the
// backend view then holds it already, and whatever the feed said of the key since,
// which is newer.
func (s *View) backendDone(k endpoint.Key, op registry.Op, id uint64) {
	if e, ok := s.echoed[k]; ok && e >= id {
		if e == id {
			delete(s.echoed, k)
		}
		return
	}
	if op.Kind == registry.OpRegister {
		s.backend[k] = op.Endpoint
	} else {
		delete(s.backend, k)
	}
}
