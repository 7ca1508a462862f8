package view

import (
	"sync"

	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// ChunkBytes caps a FULL_SNAPSHOT message: large enough that a snapshot of 100,000
// endpoints is a few hundred messages, far below gRPC's 4 MiB message limit.
const ChunkBytes = 64 << 10

// Snapshot is the full state at one version, already in wire form. It is built once
// per version and shared by every watcher that needs it, so a reconnect storm costs
// one build, not one per agent. It never changes once built.
type Snapshot struct {
	At token.Version
	// Items are the endpoints in each of the FULL_SNAPSHOT messages; Parts
	// yields a message's parts.
	Items []int
	// Out is what Config.WrapSnapshot made of the snapshot, once: the sending
	// layer's messages, shared by every watcher sent them.
	Out  any
	wrap func(*Snapshot) any
	// encs are the encodings the messages are runs of, in order: a full
	// snapshot's are its buckets', kept for its compressed form too
	// (compress.go): built once from zips, in groups of groupSize buckets, and
	// shared, in zip. starts are where each message begins in them, nparts the
	// parts of all messages. A build so holds a word a bucket, not one a part.
	encs      []*chunker
	starts    []partRef
	nparts    int
	zips      *zipCache
	groupSize int
	zipOnce   sync.Once
	zip       *Snapshot
}

// Part is a sealed part of FULL_SNAPSHOT messages: its bytes, never written
// again, and what Config.WrapPart made of them once (the sending layer's buffer).
type Part struct {
	Data []byte
	Out  any
}

// partRef is the place of a part: part of encs[enc].
type partRef struct{ enc, part int32 }

// Len is the number of messages.
func (s *Snapshot) Len() int { return len(s.Items) }

// PartCount is the number of parts of all messages.
func (s *Snapshot) PartCount() int { return s.nparts }

// Parts calls f with each part of message i, in order: the message is their
// bytes, concatenated (a FULL_SNAPSHOT message is its items only).
func (s *Snapshot) Parts(i int, f func(*Part)) {
	end := partRef{enc: int32(len(s.encs))}
	if i+1 < len(s.starts) {
		end = s.starts[i+1]
	}
	for at := s.starts[i]; at != end; {
		c := s.encs[at.enc]
		if int(at.part) == len(c.parts) {
			at = partRef{enc: at.enc + 1}
			continue
		}
		f(&c.parts[at.part])
		at.part++
	}
}

// Snapshot returns the full state at the current version. Only the buckets changed
// since the last build are encoded again (partition); the read lock keeps every
// change out until the snapshot is assembled, so it holds exactly the state at its
// version.
func (s *View) Snapshot() *Snapshot {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.snap != nil && s.snap.At.Seq == s.seq {
		return s.snap
	}
	s.snap = s.wrap(s.parts.snapshot(s.current()))
	return s.snap
}

// ScopedSnapshot returns the state of the given services at the current version,
// for one scoped watcher: scopes are small and differ, so it is not shared.
func (s *View) ScopedSnapshot(services map[string]struct{}) *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	remaining := 0
	for svc := range services {
		for e := range s.byService[svc] {
			remaining += wire.SnapshotItemSize(e.wire)
		}
	}
	c := chunker{wrap: s.cfg.WrapPart}
	for svc := range services {
		for e := range s.byService[svc] {
			c.add(e.wire, remaining)
			remaining -= wire.SnapshotItemSize(e.wire)
		}
	}
	c.finish()
	return s.wrap(packed(s.current(), []*chunker{&c}))
}

// wrap attaches the sending layer's form to snap (Config.WrapSnapshot), and has
// its compressed form get it too.
func (s *View) wrap(snap *Snapshot) *Snapshot {
	snap.wrap = s.cfg.WrapSnapshot
	if snap.wrap != nil {
		snap.Out = snap.wrap(snap)
	}
	return snap
}

// chunker encodes endpoints into parts of FULL_SNAPSHOT messages of at most
// ChunkBytes each (unless one endpoint alone is larger). A sealed part is never
// written again: snapshots still being sent share it.
type chunker struct {
	wrap   func([]byte) any // Config.WrapPart
	parts  []Part
	items  []int  // the endpoints in each part
	open   []byte // the part being filled
	inOpen int    // the endpoints in it
}

// add appends one endpoint, starting a new part when the current one is full.
// remaining (the bytes still to come) sizes a new part's buffer.
func (c *chunker) add(ep []byte, remaining int) {
	n := wire.SnapshotItemSize(ep)
	if len(c.open) > 0 && len(c.open)+n > ChunkBytes {
		c.seal()
	}
	if c.open == nil {
		c.open = make([]byte, 0, max(n, min(ChunkBytes, remaining)))
	}
	c.open = wire.AppendSnapshotItem(c.open, ep)
	c.inOpen++
}

// seal ends the open part.
func (c *chunker) seal() {
	c.parts = append(c.parts, sealPart(c.open, c.wrap))
	c.items = append(c.items, c.inOpen)
	c.open, c.inOpen = nil, 0
}

// sealPart seals b as a part, with wrap's form of it.
func sealPart(b []byte, wrap func([]byte) any) Part {
	p := Part{Data: b}
	if wrap != nil {
		p.Out = wrap(b)
	}
	return p
}

func (c *chunker) finish() {
	if len(c.open) > 0 {
		c.seal()
	}
}

// packed returns the snapshot at version at of the parts of encs, which are
// finished. Consecutive parts that fit in ChunkBytes together make one message,
// without a copy: a message is its run of parts, one transport buffer a part. A
// FULL_SNAPSHOT message is its items only, so parts concatenate.
func packed(at token.Version, encs []*chunker) *Snapshot {
	snap := &Snapshot{At: at, encs: encs}
	size, items := 0, 0
	for e, c := range encs {
		for i, part := range c.parts {
			if items > 0 && size+len(part.Data) > ChunkBytes {
				snap.Items = append(snap.Items, items)
				size, items = 0, 0
			}
			if items == 0 {
				snap.starts = append(snap.starts, partRef{enc: int32(e), part: int32(i)})
			}
			size += len(part.Data)
			items += c.items[i]
			snap.nparts++
		}
	}
	if items > 0 {
		snap.Items = append(snap.Items, items)
	}
	return snap
}
