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
	at     token.Version
	chunks []encoded
	count  int
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
	snap := &snapshot{at: s.current(), count: len(s.entries)}
	remaining := 0
	for _, e := range s.entries {
		remaining += snapshotItemSize(e.wire)
	}
	var chunk []byte
	for _, e := range s.entries {
		n := snapshotItemSize(e.wire)
		if len(chunk) > 0 && len(chunk)+n > chunkBytes {
			snap.chunks = append(snap.chunks, chunk)
			chunk = nil
		}
		if chunk == nil {
			chunk = make([]byte, 0, max(n, min(chunkBytes, remaining)))
		}
		chunk = appendSnapshotItem(chunk, e.wire)
		remaining -= n
	}
	if len(chunk) > 0 {
		snap.chunks = append(snap.chunks, chunk)
	}
	s.snap = snap
	return snap
}
