package view

import (
	"container/heap"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The persisted frontier is the version up to which every write this replica
// accepted is persisted (or superseded by a later write that is itself still
// protected). Clients forget their writes up to it, so it must never pass a write
// that a crash could lose.
//
// A write is acknowledged with the version at which it is visible. A write that
// changes nothing visible (an agent's TTL refresh of a pending endpoint) is
// acknowledged with the current version, which may be that of an earlier write to
// the same key: so a pending key keeps the smallest version any of its
// unpersisted writes was acknowledged with (since), and the frontier stays below
// the smallest since of all pending keys.
//
// acceptedHeap orders one record per pending key by since. A key's since only
// grows, and a new record is pushed when it does; records whose key is no longer
// pending, or whose since is stale, are dropped lazily from the top and, when
// they outnumber the live ones, by a rebuild. So the heap stays proportional to
// the pending keys however often they are rewritten.

type acceptRec struct {
	key   endpoint.Key
	since uint64
}

type acceptedHeap []acceptRec

func (h acceptedHeap) Len() int           { return len(h) }
func (h acceptedHeap) Less(i, j int) bool { return h[i].since < h[j].since }
func (h acceptedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *acceptedHeap) Push(x any)        { *h = append(*h, x.(acceptRec)) }
func (h *acceptedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = acceptRec{}
	*h = old[:len(old)-1]
	return x
}

// live reports whether r is the current record of a pending key.
func (s *View) live(r acceptRec) bool {
	p := s.pending[r.key]
	return p != nil && p.since == r.since
}

// track records that pending key k is protected from p.since on. Callers hold the
// write lock.
func (s *View) track(k endpoint.Key, p *pend) {
	heap.Push(&s.accepted, acceptRec{key: k, since: p.since})
}

// settle drops stale records from the top of the heap, so that persisted (which
// runs under a read lock) finds the live minimum there, and rebuilds the heap when
// stale records dominate. Callers hold the write lock, after changing pending.
func (s *View) settle() {
	for len(s.accepted) > 0 && !s.live(s.accepted[0]) {
		heap.Pop(&s.accepted)
	}
	if len(s.accepted) > 2*len(s.pending)+64 {
		kept := s.accepted[:0]
		for _, r := range s.accepted {
			if s.live(r) {
				kept = append(kept, r)
			}
		}
		clear(s.accepted[len(kept):])
		s.accepted = kept
		heap.Init(&s.accepted)
	}
}

// persisted is the current frontier. Callers hold the lock (a read lock will do).
// settle keeps a live record on top after every change to pending; a stale one
// would still be safe here, since a key's since only grows until it leaves, so it
// only holds the frontier back.
func (s *View) persisted() uint64 {
	if len(s.accepted) == 0 {
		return s.seq
	}
	return below(s.accepted[0].since)
}

// below is the frontier that protects a write acknowledged at version since. A
// write acknowledged at 0 (nothing had happened yet) is protected by 0, which
// clients read as "nothing persisted".
func below(since uint64) uint64 {
	if since == 0 {
		return 0
	}
	return since - 1
}
