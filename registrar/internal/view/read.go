package view

import (
	"iter"
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// Reader is the view as one read sees it: every method reads under the read lock
// that Read holds, so that several reads (a watcher's walk along the ring, a
// catalog of the entries less the ring's latest events) see one version. It is
// valid only inside the function Read runs.
type Reader struct{ s *View }

// Read runs f under the read lock. f must not keep the Reader, nor call the
// view's other methods (the lock is not reentrant against a waiting writer).
// A fan-out takes it once per watcher: f is not boxed, and holds no lock of its
// own.
func (s *View) Read(f func(Reader)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f(Reader{s})
}

// Seq is the latest version's sequence, 0 before any event.
func (r Reader) Seq() uint64 { return r.s.seq }

// Epoch is the view's epoch.
func (r Reader) Epoch() uint64 { return r.s.epoch }

// Current is the latest version, with the state's digest.
func (r Reader) Current() token.Version { return r.s.current() }

// At returns event seq if the ring still holds it.
func (r Reader) At(seq uint64) (Event, bool) { return r.s.eventAt(seq) }

// CanResume reports whether every event after seq is still in the ring.
func (r Reader) CanResume(seq uint64) bool { return r.s.canResume(seq) }

// Entries yields every visible endpoint, in no order. The endpoints share their
// annotations with the view: callers only read them.
func (r Reader) Entries() iter.Seq[endpoint.Endpoint] {
	return func(yield func(endpoint.Endpoint) bool) {
		for _, e := range r.s.entries {
			if !yield(e.ep) {
				return
			}
		}
	}
}

// Start is how a watcher's stream begins: with a full snapshot, or by replaying
// the ring from Next on and completing at CompleteAt.
type Start struct {
	Full       bool
	Next       uint64 // the sequence of the first event to send
	CompleteAt uint64 // the version a resumed replay's SNAPSHOT_COMPLETE carries
	Resumed    bool
}

// Since decides how a stream whose client holds token lastVersion begins: with a
// full snapshot, or by replaying the ring from the token on (nothing, when the
// token is current, or when it is one the ring cannot replay but of the very
// state the view holds). err is the token's parse error, if any.
func (s *View) Since(lastVersion string) (_ Start, err error) {
	v, err := token.Parse(lastVersion)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if lastVersion == "" || err != nil || v.Epoch != s.epoch || !s.canResume(v.Seq) {
		if err == nil && s.sameState(v) { // digest.go
			return Start{Next: s.seq + 1, CompleteAt: s.seq, Resumed: true}, nil
		}
		return Start{Full: true}, err
	}
	return Start{Next: v.Seq + 1, CompleteAt: s.seq, Resumed: true}, nil
}

// Stats is the view's size at one version, for Status.
type Stats struct {
	Version uint64
	Counts  map[string]int // visible endpoints per cluster
	Pending int            // accepted writes not yet persisted
}

// Stats returns the view's size now.
func (s *View) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Version: s.seq, Counts: maps.Clone(s.byCluster), Pending: len(s.pending)}
}

// Endpoints returns a copy of every visible endpoint and the version it is at.
// The lock is held to copy the entries' pointers only: an entry's endpoint never
// changes once it is visible (a change is a new entry). The slice they are
// copied to (800 KB at 100,000 endpoints) is allocated before, the count read
// under a brief lock; if the entries grew past it meanwhile, again. The
// Annotations maps are the view's own: read them only.
func (s *View) Endpoints() ([]endpoint.Endpoint, uint64) {
	s.mu.RLock()
	n := len(s.entries)
	s.mu.RUnlock()
	var entries []*entry
	var v uint64
	for {
		entries = make([]*entry, 0, n+n/64+16) // room for a few registrations meanwhile
		s.mu.RLock()
		if n = len(s.entries); n <= cap(entries) {
			entries = slices.AppendSeq(entries, maps.Values(s.entries))
			v = s.seq
			s.mu.RUnlock()
			break
		}
		s.mu.RUnlock()
	}
	out := make([]endpoint.Endpoint, len(entries))
	for i, e := range entries {
		out[i] = e.ep
	}
	return out, v
}

// WaitingEchoes is the number of keys with a write whose echo the change feed
// has not delivered yet (echo.go).
func (s *View) WaitingEchoes() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.echoes)
}

// Persisted is the current persisted frontier (frontier.go).
func (s *View) Persisted() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.persisted()
}

// Lookup returns the visible endpoint of key k.
func (r Reader) Lookup(k endpoint.Key) (endpoint.Endpoint, bool) {
	if e := r.s.entries[k]; e != nil {
		return e.ep, true
	}
	return endpoint.Endpoint{}, false
}

// Prepared reports whether a full snapshot and its compressed form have been
// built (MarkReady builds them before the view is ready).
func (s *View) Prepared() bool {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	return s.snap != nil && s.snap.Len() > 0 && s.snap.zip != nil && s.snap.zip.Len() > 0
}
