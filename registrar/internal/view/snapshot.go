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
	// Messages are the FULL_SNAPSHOT messages, shared by every watcher sent them:
	// each a run of parts, which concatenate (a FULL_SNAPSHOT message is its
	// items only).
	Messages [][]*Part
	Items    []int // the endpoints in each message
	// Out is what Config.WrapSnapshot made of the snapshot, once: the sending
	// layer's messages, shared by every watcher sent them.
	Out  any
	wrap func(*Snapshot) any
	// encs are the buckets' encodings a full snapshot was assembled from, kept for
	// its compressed form (compress.go): built once from zips, in groups of
	// groupSize buckets, and shared, in zip.
	encs      []*chunker
	zips      *zipCache
	groupSize int
	zipOnce   sync.Once
	zip       *Snapshot
}

// Part is a sealed part of FULL_SNAPSHOT messages: its bytes, never written
// again, and what Config.WrapPart made of them once (the sending layer's buffer).
// Snapshots hold parts by pointer, into the encodings that sealed them (which
// never change once finished): a build copies a word a part, not the part.
type Part struct {
	Data []byte
	Out  any
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
	var r run
	r.add(&c)
	return s.wrap(packed(s.current(), &r))
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

// run is the sealed parts a snapshot is packed from, in order, with the
// endpoints in each.
type run struct {
	parts []*Part
	items []int
}

// add appends the parts of c, which is finished.
func (r *run) add(c *chunker) {
	for i := range c.parts {
		r.parts = append(r.parts, &c.parts[i])
	}
	r.items = append(r.items, c.items...)
}

// packed returns the snapshot at version at of c's parts. Consecutive parts that
// fit in ChunkBytes together make one message, without a copy: a message is its
// run of c.parts, one transport buffer a part. A FULL_SNAPSHOT message is its
// items only, so parts concatenate.
func packed(at token.Version, c *run) *Snapshot {
	snap := &Snapshot{At: at}
	start, size, items := 0, 0, 0
	for i, part := range c.parts {
		if i > start && size+len(part.Data) > ChunkBytes {
			snap.Messages = append(snap.Messages, c.parts[start:i:i])
			snap.Items = append(snap.Items, items)
			start, size, items = i, 0, 0
		}
		size += len(part.Data)
		items += c.items[i]
	}
	if start < len(c.parts) {
		snap.Messages = append(snap.Messages, c.parts[start:])
		snap.Items = append(snap.Items, items)
	}
	return snap
}
