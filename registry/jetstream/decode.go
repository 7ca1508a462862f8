package jetstream

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Headers of the messages this backend writes, beyond the Nats-* ones.
const (
	// OpHeader marks a removal published by Unregister. Removals also carry
	// Nats-Marker-Reason: Remove, so every reader that follows ADR-43 (nats CLI,
	// other clients) sees them as deletions too, and the server does not place a
	// second marker when the removal expires.
	OpHeader = "Switchboard-Op"
	// OpUnregister is OpHeader's value on a removal.
	OpUnregister = "unregister"
	// markerReasonRemove is the ADR-43 reason for an explicit removal.
	markerReasonRemove = "Remove"
)

// kvOperationHeader is written by NATS KV clients; a DEL or PURGE there is a removal
// too, so a stream touched by KV tooling is still read correctly.
const kvOperationHeader = "KV-Operation"

type msgKind uint8

const (
	msgLive    msgKind = iota + 1 // an entry
	msgRemoval                    // a server delete marker or a removal we published
	msgBad                        // undecodable: counted and logged, never surfaced
	msgForeign                    // not an entry subject (consumerFilters): skipped
)

// decoded is one stream message read as an entry.
type decoded struct {
	kind    msgKind
	subject string
	seq     uint64            // stream sequence: the later of two entries for one key wins
	ep      endpoint.Endpoint // set for msgLive
	shared  bool              // ep is the cache's: hand out only a detached copy
	ann     []string          // when shared, ep's annotations as key, value pairs
	err     error             // set for msgBad
}

// isRemoval reports whether the headers mark a deletion rather than an entry.
func isRemoval(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	if h.Get(jetstream.MarkerReasonHeader) != "" || h.Get(OpHeader) == OpUnregister {
		return true
	}
	switch h.Get(kvOperationHeader) {
	case "DEL", "PURGE":
		return true
	}
	return false
}

// decoder reads messages as entries for one reader (a List, a watch). It is not safe
// for concurrent use; the cache it shares is.
type decoder struct {
	subj  Subjects
	in    interner
	cache *payloadCache
	keys  []uint64         // decodeAll's, reused
	hits  []*cachedPayload // decodeAll's look-ups, reused
	fresh []cachedPayload  // payloads decoded since the cache was last told
}

func (r *driver) decoder() *decoder {
	return &decoder{subj: r.subj, cache: &r.cache}
}

// decode classifies one message. A live entry must decode, validate, and sit on a
// subject whose cluster, protocol, service and address tokens are its own: a payload
// on a foreign subject would otherwise shadow or duplicate another entry. The id
// token is not checked (Subjects.holds), so one key can have entries on more than one
// subject; readers keep the one with the highest sequence. The endpoint returned is
// shared with the cache: read it, and hand out only a detached copy.
func (d *decoder) decode(subject string, seq uint64, h nats.Header, data []byte) decoded {
	key := payloadKey(data)
	out := d.decodeWith(subject, seq, h, data, key, d.cache.get(key), true)
	d.cache.putAll(d.fresh)
	clear(d.fresh)
	d.fresh = d.fresh[:0]
	return out
}

// decodeAll is decode for each of msgs, in order, looking them all up in the cache
// under one lock and, with remember, remembering the new ones under one more. Taken
// twice per message, the lock and the map it guards went back and forth between the
// cores decoding a full lookup: most of a cold lookup's caching cost. Without
// remember, an empty cache is not consulted at all.
func (d *decoder) decodeAll(msgs []rawMsg, remember bool, each func(decoded)) {
	if !remember && d.cache.empty() {
		for _, m := range msgs {
			each(d.decodeWith(m.subject, m.seq, m.h, m.data, 0, nil, false))
		}
		return
	}
	d.keys = d.keys[:0]
	for _, m := range msgs {
		d.keys = append(d.keys, payloadKey(m.data))
	}
	d.hits = d.cache.getAll(d.keys, d.hits[:0])
	for i, m := range msgs {
		each(d.decodeWith(m.subject, m.seq, m.h, m.data, d.keys[i], d.hits[i], remember))
	}
	clear(d.hits) // the cache may forget them
	d.cache.putAll(d.fresh)
	clear(d.fresh)
	d.fresh = d.fresh[:0]
}

// decodeWith is decode given data's key and what the cache holds under it (nil for
// nothing); with remember, a payload decoded or found on a new subject is added to
// d.fresh.
func (d *decoder) decodeWith(subject string, seq uint64, h nats.Header, data []byte, key uint64, hit *cachedPayload, remember bool) decoded {
	if !d.subj.entryShaped(subject) {
		return decoded{kind: msgForeign, subject: subject, seq: seq}
	}
	if isRemoval(h) {
		return decoded{kind: msgRemoval, subject: subject, seq: seq}
	}
	var ep endpoint.Endpoint
	var owner string
	var ann []string
	shared := false
	if hit != nil && bytes.Equal(hit.data, data) { // else another payload with the same hash
		ep, owner, ann, shared = hit.ep, hit.subject, hit.ann, true
	} else {
		var err error
		if ep, err = decodeJSON(data, &d.in); err != nil {
			return decoded{kind: msgBad, subject: subject, seq: seq, err: err}
		}
	}
	if owner != subject {
		if !d.subj.holds(subject, ep.Key()) {
			return decoded{kind: msgBad, subject: subject, seq: seq, err: fmt.Errorf("payload for %s is on subject %s, want %s", ep.Key(), subject, d.subj.For(ep.Key()))}
		}
		if remember {
			if !shared {
				ann = pairsOf(ep.Annotations)
			}
			d.fresh = append(d.fresh, cachedPayload{key, data, subject, ep, ann})
			shared = true
		}
	}
	return decoded{kind: msgLive, subject: subject, seq: seq, ep: ep, shared: shared, ann: ann}
}

// pairsOf lists m as key, value pairs.
func pairsOf(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	pairs := make([]string, 0, 2*len(m))
	for k, v := range m {
		pairs = append(pairs, k, v)
	}
	return pairs
}

// detachPairs is detach for an endpoint whose annotations are also listed in pairs
// (pairsOf): building the map from the list costs less than walking the cache's map,
// which was half of a repeated full lookup's decoding.
func detachPairs(e endpoint.Endpoint, pairs []string) endpoint.Endpoint {
	if e.Annotations != nil {
		m := make(map[string]string, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			m[pairs[i]] = pairs[i+1]
		}
		e.Annotations = m
	}
	return e
}

// detach copies e so that it shares no memory with the cache. maps.Clone (behind
// Endpoint.Clone) copies whole hash groups, far more than the one or two annotations
// an entry usually has.
func detach(e endpoint.Endpoint) endpoint.Endpoint {
	if e.Annotations != nil {
		m := make(map[string]string, len(e.Annotations))
		maps.Copy(m, e.Annotations)
		e.Annotations = m
	}
	return e
}

// payloadCache remembers decoded, validated payloads by their exact bytes, with the
// subject they were found to belong to, so the entries a registry reads again and
// again (every lookup re-reads every matching entry) are decoded once. Keying by
// content keeps it correct whatever happens to the stream; it forgets everything when
// full, which bounds it without bookkeeping.
//
// The map is keyed by a hash of the payload, and a hit is confirmed by comparing
// the bytes, which the cache keeps by reference: they are a message's buffer, which
// nats.go allocates for each message and nothing writes to afterwards. Keyed by the
// payload as a string, every payload decoded was copied for the key and hashed twice
// (looked up, then stored), and the map's slots held 16-byte keys. Values are
// pointers: an entry held in the map itself made every look-up take the map's slow
// path for large values and every growth move ~150 bytes a slot.
type payloadCache struct {
	mu sync.Mutex
	m  map[uint64]*cachedPayload
}

type cachedPayload struct {
	key     uint64
	data    []byte // never written to: see payloadCache
	subject string
	ep      endpoint.Endpoint
	ann     []string // ep's annotations as key, value pairs (pairsOf), for detachPairs
}

const maxCachedPayloads = 1 << 17

var payloadSeed = maphash.MakeSeed()

func payloadKey(data []byte) uint64 { return maphash.Bytes(payloadSeed, data) }

// get returns what the cache holds under key, nil for nothing; the caller compares
// the payload.
func (c *payloadCache) get(key uint64) *cachedPayload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// empty reports whether the cache holds nothing.
func (c *payloadCache) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m) == 0
}

// getAll is get for each of keys, appended to hits.
func (c *payloadCache) getAll(keys []uint64, hits []*cachedPayload) []*cachedPayload {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		hits = append(hits, c.m[k])
	}
	return hits
}

// reserve makes an empty cache room for n payloads.
func (c *payloadCache) reserve(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[uint64]*cachedPayload, min(n, maxCachedPayloads))
	}
}

// putAll keeps each payload, whose endpoint must not be handed to anyone without
// detach.
func (c *payloadCache) putAll(ps []cachedPayload) {
	if len(ps) == 0 {
		return
	}
	// One allocation for the lot, made before the lock: one per payload was a tenth
	// of a cold lookup's allocations. A payload the cache forgets keeps its slab
	// alive until the rest of the slab is forgotten too, which the bound covers.
	slab := slices.Clone(ps)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range slab {
		if c.m == nil || len(c.m) >= maxCachedPayloads {
			c.m = make(map[uint64]*cachedPayload)
		}
		c.m[slab[i].key] = &slab[i]
	}
}
