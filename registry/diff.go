package registry

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Diff reports the differences between what a consumer holds and a re-read of the
// whole state, as the events that turn the one into the other, through emit:
// Removed (with the key's fields only) for each key held that state lacks, then
// Updated for each key of both whose endpoint changed — same says whether the held
// value still describes the endpoint — and Added for each key of state not held. A
// key the re-read left as it was sends nothing: a consumer never sees an unchanged
// entry flap (Removed, then Added) or an Added for an entry it holds. Neither map is
// changed, and the events come in no particular order. emit returns false to stop;
// Diff then returns false.
//
// The Front diffs every watch's re-reads with it; the registrar client diffs a new
// snapshot against its last one.
func Diff[V any](held map[endpoint.Key]V, state map[endpoint.Key]endpoint.Endpoint,
	same func(V, endpoint.Endpoint) bool, emit func(EventType, endpoint.Key, endpoint.Endpoint) bool) bool {
	for k := range held {
		if _, ok := state[k]; !ok && !emit(Removed, k, k.Endpoint()) {
			return false
		}
	}
	for k, e := range state {
		v, ok := held[k]
		switch {
		case !ok:
			if !emit(Added, k, e) {
				return false
			}
		case !same(v, e):
			if !emit(Updated, k, e) {
				return false
			}
		}
	}
	return true
}

// sumSeed makes sum's sums; they live as long as the process. A seed no writer
// knows keeps anyone from crafting an update whose sum matches the value it
// replaces, which watchers would then not be told of.
var sumSeed = maphash.MakeSeed()

// sum is a 64-bit sum of every field endpoint.Equal compares but the key, which
// the sums are kept by: endpoints of one key that are equal have equal sums, and
// unequal ones differ but for a chance of 2⁻⁶⁴. A watch keeps a sum per key it has
// sent rather than the endpoint: etcd's watcher measured a map of 100,000 endpoints
// at 27 MB that the garbage collector scanned word by word.
//
// The fields go into a buffer on the stack and are hashed at once: a maphash.Hash
// fed field by field, the key too, cost nearly twice as much, on every event a
// watch forwards.
func sum(e endpoint.Endpoint) uint64 {
	var b [128]byte
	buf := b[:0]
	for _, s := range [...]string{e.Node, e.Region, e.Zone} {
		buf = appendString(buf, s)
	}
	for _, n := range [...]int64{int64(e.Priority), int64(e.Weight), int64(e.TTL), int64(e.Health)} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(n))
	}
	if len(e.Annotations) == 1 { // the usual case: one hash for all
		for k, v := range e.Annotations {
			buf = appendString(appendString(buf, k), v)
		}
		return maphash.Bytes(sumSeed, buf)
	}
	out := maphash.Bytes(sumSeed, buf)
	// Annotations in any order: a sum of each pair's own sum.
	for k, v := range e.Annotations {
		out += maphash.Bytes(sumSeed, appendString(appendString(b[:0], k), v))
	}
	return out
}

// appendString appends s with its length first, so that no two lists of strings
// make the same bytes.
func appendString(buf []byte, s string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(s))), s...)
}
