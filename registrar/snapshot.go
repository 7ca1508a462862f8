package registrar

import (
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// chunkBytes caps a FULL_SNAPSHOT message: large enough that a snapshot of 100,000
// endpoints is a few hundred messages, far below gRPC's 4 MiB message limit.
const chunkBytes = 64 << 10

// snapshot is the full state at one version, already in wire form. It is built once
// per version and shared by every watcher that needs it, so a reconnect storm costs
// one build, not one per agent.
type snapshot struct {
	at token.Version
	// chunks are the FULL_SNAPSHOT messages, shared by every watcher sent them.
	chunks []*shared
	items  []int // the endpoints in each chunk
	count  int
	open   []byte // the chunk being filled, while building
	inOpen int    // the endpoints in it
}

// snapshot returns the full state at the current version.
func (s *state) snapshot() *snapshot {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.snap != nil && s.snap.at.Seq == s.seq {
		return s.snap
	}
	remaining := 0
	for _, e := range s.entries {
		remaining += snapshotItemSize(e.wire)
	}
	snap := &snapshot{at: s.current()}
	for _, e := range s.entries {
		snap.add(e.wire, remaining)
		remaining -= snapshotItemSize(e.wire)
	}
	snap.finish()
	s.snap = snap
	return snap
}

// scopedSnapshot returns the state of the given services at the current version,
// for one scoped watcher: scopes are small and differ, so it is not shared.
func (s *state) scopedSnapshot(services map[string]struct{}) *snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	remaining := 0
	for svc := range services {
		for _, e := range s.byService[svc] {
			remaining += snapshotItemSize(e.wire)
		}
	}
	snap := &snapshot{at: s.current()}
	for svc := range services {
		for _, e := range s.byService[svc] {
			snap.add(e.wire, remaining)
			remaining -= snapshotItemSize(e.wire)
		}
	}
	snap.finish()
	return snap
}

// add appends one endpoint, starting a new chunk when the current one is full.
// remaining (the bytes still to come) sizes a new chunk's buffer.
func (snap *snapshot) add(wire []byte, remaining int) {
	n := snapshotItemSize(wire)
	if len(snap.open) > 0 && len(snap.open)+n > chunkBytes {
		snap.seal()
	}
	if snap.open == nil {
		snap.open = make([]byte, 0, max(n, min(chunkBytes, remaining)))
	}
	snap.open = appendSnapshotItem(snap.open, wire)
	snap.count++
	snap.inOpen++
}

// seal ends the open chunk.
func (snap *snapshot) seal() {
	snap.chunks = append(snap.chunks, share(snap.open))
	snap.items = append(snap.items, snap.inOpen)
	snap.open, snap.inOpen = nil, 0
}

func (snap *snapshot) finish() {
	if len(snap.open) > 0 {
		snap.seal()
	}
}
