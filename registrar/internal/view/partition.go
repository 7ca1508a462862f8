package view

import (
	"hash/maphash"
	"math"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// bucketBytes is the encoded size a bucket of the full snapshot aims at. A change
// costs the encoding of one bucket, so buckets are small; packed puts several in one
// message, so the number of messages stays near that of ChunkBytes messages.
const bucketBytes = ChunkBytes / 16

// partition keeps the full snapshot in parts: the endpoints are split into
// buckets by a hash of their key, and each bucket keeps its encoding until one of
// its endpoints changes. A hash, not the service, decides the bucket: services
// range from one endpoint to tens of thousands, buckets by hash are all about the
// same size. Their number is a power of two that follows the fleet's size (fit),
// so a bucket stays near bucketBytes whether the fleet has a thousand endpoints
// or a million.
//
// Locking: put and drop change the buckets under the view's write lock; snapshot
// reads, encodes and resizes them under snapMu and the read lock, which keeps the
// writers out, snapMu the other builds.
type partition struct {
	seed    maphash.Seed
	target  int              // bucketBytes; smaller in tests, for many buckets of few endpoints
	buckets []bucket         // a power of two of them
	bytes   int              // the encoded size of every endpoint's snapshot item
	zips    zipCache         // the compressed groups of buckets (compress.go)
	wrap    func([]byte) any // Config.WrapPart
}

type bucket struct {
	members []*entry // in any order; entry.slot is the index
	bytes   int
	enc     *chunker // the members encoded; nil after a change
}

func newPartition(wrap func([]byte) any) *partition {
	return &partition{seed: maphash.MakeSeed(), target: bucketBytes, buckets: make([]bucket, 1), wrap: wrap, zips: zipCache{wrap: wrap}}
}

// put records that key k now holds e, which replaces old (nil for a new key).
func (p *partition) put(k endpoint.Key, old, e *entry) {
	if old == nil {
		e.hash = maphash.Comparable(p.seed, k)
		p.add(e)
		return
	}
	e.hash, e.slot = old.hash, old.slot
	b := p.bucketOf(e)
	b.members[e.slot] = e
	p.changed(b, wire.SnapshotItemSize(e.wire)-wire.SnapshotItemSize(old.wire))
}

// drop removes e.
func (p *partition) drop(e *entry) {
	b := p.bucketOf(e)
	last := len(b.members) - 1
	moved := b.members[last]
	b.members[e.slot], moved.slot = moved, e.slot
	b.members[last] = nil
	b.members = b.members[:last]
	p.changed(b, -wire.SnapshotItemSize(e.wire))
}

func (p *partition) add(e *entry) {
	b := p.bucketOf(e)
	e.slot = int32(len(b.members))
	b.members = append(b.members, e)
	p.changed(b, wire.SnapshotItemSize(e.wire))
}

func (p *partition) bucketOf(e *entry) *bucket {
	return &p.buckets[e.hash&uint64(len(p.buckets)-1)]
}

// changed marks b to be encoded again, d bytes larger.
func (p *partition) changed(b *bucket, d int) {
	b.bytes += d
	p.bytes += d
	b.enc = nil
}

// snapshot assembles the full snapshot, encoding the buckets changed since the
// last one.
func (p *partition) snapshot(at token.Version) *Snapshot {
	p.fit()
	encs := make([]*chunker, len(p.buckets))
	for i := range p.buckets {
		encs[i] = p.buckets[i].encoded(p.wrap)
	}
	snap := packed(at, encs)
	// A compressed frame holds about a message's worth of buckets.
	snap.zips, snap.groupSize = &p.zips, max(1, ChunkBytes/p.target)
	return snap
}

func (b *bucket) encoded(wrap func([]byte) any) *chunker {
	if b.enc == nil {
		b.enc = &chunker{wrap: wrap}
		remaining := b.bytes
		for _, e := range b.members {
			b.enc.add(e.wire, remaining)
			remaining -= wire.SnapshotItemSize(e.wire)
		}
		b.enc.finish()
	}
	return b.enc
}

// fit redistributes the endpoints over more or fewer buckets once the average
// bucket has grown past twice target or shrunk below half of it. It picks the
// power of two nearest to bytes/target, which leaves the average a factor of √2
// or more away from both limits: a fleet that hovers about a limit does not
// redistribute at every build. Every bucket is encoded again after, which costs
// what a full build did, once per doubling or halving of the fleet.
func (p *partition) fit() {
	n := len(p.buckets)
	avg := p.bytes / n
	if avg <= 2*p.target && (avg >= p.target/2 || n == 1) {
		return
	}
	want := 1
	for float64(want)*math.Sqrt2 < float64(p.bytes)/float64(p.target) {
		want <<= 1
	}
	old := p.buckets
	p.buckets, p.bytes = make([]bucket, want), 0
	for i := range old {
		for _, e := range old[i].members {
			p.add(e)
		}
	}
}
