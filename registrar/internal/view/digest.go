package view

import "github.com/switchboard-mesh/switchboard/registrar/token"

// The state digest lets a registrar resume a watcher whose token it did not issue
// (docs/registrar.md, "Resuming across a restart"). It is the sum, modulo 2^64, of
// a hash of every visible entry's wire form: order-independent, so another replica
// that reached the same state by another path has the same digest, and kept up to
// date in O(1) by every put and drop. Every version the view issues carries
// the digest of the state at that version, which is what a watcher's cache holds
// there: a token of another epoch whose digest equals the current one names a cache
// that needs no snapshot.
//
// The hash must be the same in every process and across restarts, so it is seeded
// by nothing: FNV-1a 64 of the bytes, then splitmix64's finalizer, which spreads
// FNV's weak high bits so that the sums of endpoints differing in a byte or two are
// as good as random. Wire forms are deterministic (wire.MarshalEndpoint), so one endpoint
// has one hash.

// EntrySum is an entry's term of the digest.
func EntrySum(wire []byte) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, b := range wire {
		h ^= uint64(b)
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// VersionAt is version seq with the digest of the state there, if known: for the
// current version and those the ring still holds. An older one gets no digest, and
// so is never resumed by another replica. Callers do not hold the lock.
func (s *View) VersionAt(seq uint64) token.Version {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if seq == s.seq {
		return s.current()
	}
	v := token.Version{Epoch: s.epoch, Seq: seq}
	if ev, ok := s.eventAt(seq); ok {
		v.Digest, v.HasDigest = ev.Digest, true
	}
	return v
}

// sameState reports whether token v, which the ring cannot replay (another epoch's,
// or too old), names the current state: then the client's cache is that state,
// and it continues from the current version without a snapshot. Callers hold the
// lock.
func (s *View) sameState(v token.Version) bool {
	return v.HasDigest && v.Digest == s.digest
}
