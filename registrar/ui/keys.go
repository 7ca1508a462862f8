package ui

import (
	"hash/maphash"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// keys finds the mirror's rows by endpoint key. A map keyed by the key itself
// holds 72 bytes of string headers per endpoint (11.5 MB of a 100,000-endpoint
// mirror's 41); one keyed by the key's 64-bit hash holds 8 (1.6 MB), and the
// rare keys whose hashes collide share a chain through row.next.
type keys struct {
	seed maphash.Seed
	m    map[uint64]*row
	n    int
}

func newKeys(size int) *keys {
	return &keys{seed: maphash.MakeSeed(), m: make(map[uint64]*row, size)}
}

func (x *keys) hash(k endpoint.Key) uint64 { return maphash.Comparable(x.seed, k) }

// get returns the row of k, nil if none.
func (x *keys) get(k endpoint.Key) *row { return x.getAt(x.hash(k), k) }

// put adds r, whose key is not there yet.
func (x *keys) put(r *row) { x.putAt(x.hash(r.ep.Key()), r) }

// remove takes r out.
func (x *keys) remove(r *row) { x.removeAt(x.hash(r.ep.Key()), r) }

// The chains, for the hash h of a key.

func (x *keys) getAt(h uint64, k endpoint.Key) *row {
	for r := x.m[h]; r != nil; r = r.next {
		if r.ep.Key() == k {
			return r
		}
	}
	return nil
}

func (x *keys) putAt(h uint64, r *row) {
	r.next = x.m[h]
	x.m[h] = r
	x.n++
}

func (x *keys) removeAt(h uint64, r *row) {
	if head := x.m[h]; head == r {
		if r.next == nil {
			delete(x.m, h)
		} else {
			x.m[h] = r.next
		}
	} else {
		p := head
		for p != nil && p.next != r {
			p = p.next
		}
		if p == nil {
			return // not there
		}
		p.next = r.next
	}
	r.next = nil
	x.n--
}

func (x *keys) len() int { return x.n }
