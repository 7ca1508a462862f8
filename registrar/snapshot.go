package registrar

import (
	"sync"

	"google.golang.org/grpc/mem"

	"github.com/switchboard-mesh/switchboard/internal/wire"
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
	// encs are the buckets' encodings a full snapshot was assembled from, kept for
	// its compressed form (compress.go): built once from zips, in groups of
	// groupSize buckets, and shared, in zip.
	encs      []*chunker
	zips      *zipCache
	groupSize int
	zipOnce   sync.Once
	zip       *snapshot
}

// snapshot returns the full state at the current version. Only the buckets changed
// since the last build are encoded again (partition); the read lock keeps every
// change out until the snapshot is assembled, so it holds exactly the state at its
// version.
func (s *state) snapshot() *snapshot {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.snap != nil && s.snap.at.Seq == s.seq {
		return s.snap
	}
	s.snap = s.parts.snapshot(s.current())
	return s.snap
}

// scopedSnapshot returns the state of the given services at the current version,
// for one scoped watcher: scopes are small and differ, so it is not shared.
func (s *state) scopedSnapshot(services map[string]struct{}) *snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	remaining := 0
	for svc := range services {
		for e := range s.byService[svc] {
			remaining += wire.SnapshotItemSize(e.wire)
		}
	}
	var c chunker
	for svc := range services {
		for e := range s.byService[svc] {
			c.add(e.wire, remaining)
			remaining -= wire.SnapshotItemSize(e.wire)
		}
	}
	c.finish()
	return packed(s.current(), &c)
}

// chunker encodes endpoints into parts of FULL_SNAPSHOT messages of at most
// chunkBytes each (unless one endpoint alone is larger). A sealed part is never
// written again: snapshots still being sent share it.
type chunker struct {
	parts  mem.BufferSlice
	items  []int  // the endpoints in each part
	open   []byte // the part being filled
	inOpen int    // the endpoints in it
}

// add appends one endpoint, starting a new part when the current one is full.
// remaining (the bytes still to come) sizes a new part's buffer.
func (c *chunker) add(ep []byte, remaining int) {
	n := wire.SnapshotItemSize(ep)
	if len(c.open) > 0 && len(c.open)+n > chunkBytes {
		c.seal()
	}
	if c.open == nil {
		c.open = make([]byte, 0, max(n, min(chunkBytes, remaining)))
	}
	c.open = wire.AppendSnapshotItem(c.open, ep)
	c.inOpen++
}

// seal ends the open part.
func (c *chunker) seal() {
	c.parts = append(c.parts, mem.SliceBuffer(c.open))
	c.items = append(c.items, c.inOpen)
	c.open, c.inOpen = nil, 0
}

func (c *chunker) finish() {
	if len(c.open) > 0 {
		c.seal()
	}
}

// packed returns the snapshot at version at of c's parts. Consecutive parts that
// fit in chunkBytes together make one message, without a copy: a message is its
// run of c.parts, one gRPC buffer a part. A FULL_SNAPSHOT message is its items
// only, so parts concatenate.
func packed(at token.Version, c *chunker) *snapshot {
	snap := &snapshot{at: at}
	start, size, items := 0, 0, 0
	for i, part := range c.parts {
		if i > start && size+part.Len() > chunkBytes {
			snap.chunks = append(snap.chunks, &shared{data: c.parts[start:i:i]})
			snap.items = append(snap.items, items)
			start, size, items = i, 0, 0
		}
		size += part.Len()
		items += c.items[i]
	}
	if start < len(c.parts) {
		snap.chunks = append(snap.chunks, &shared{data: c.parts[start:]})
		snap.items = append(snap.items, items)
	}
	return snap
}
