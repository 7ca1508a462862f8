package jetstream

import (
	"fmt"
	"maps"
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
}

func (r *driver) decoder() *decoder {
	return &decoder{subj: r.subj, in: interner{}, cache: &r.cache}
}

// decode classifies one message. A live entry must decode, validate, and sit on a
// subject whose cluster, protocol, service and address tokens are its own: a payload
// on a foreign subject would otherwise shadow or duplicate another entry. The id
// token is not checked (Subjects.holds), so one key can have entries on more than one
// subject; readers keep the one with the highest sequence. The endpoint returned is
// shared with the cache: read it, and hand out only a detached copy.
func (d *decoder) decode(subject string, seq uint64, h nats.Header, data []byte) decoded {
	if !d.subj.entryShaped(subject) {
		return decoded{kind: msgForeign, subject: subject, seq: seq}
	}
	if isRemoval(h) {
		return decoded{kind: msgRemoval, subject: subject, seq: seq}
	}
	ep, owner, ok := d.cache.get(data)
	if !ok {
		var err error
		if ep, err = decodeJSON(data, d.in); err != nil {
			return decoded{kind: msgBad, subject: subject, seq: seq, err: err}
		}
	}
	if owner != subject {
		if !d.subj.holds(subject, ep.Key()) {
			return decoded{kind: msgBad, subject: subject, seq: seq, err: fmt.Errorf("payload for %s is on subject %s, want %s", ep.Key(), subject, d.subj.For(ep.Key()))}
		}
		d.cache.put(data, subject, ep)
	}
	return decoded{kind: msgLive, subject: subject, seq: seq, ep: ep}
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
// full, which bounds it without bookkeeping. Values are pointers: an entry held in
// the map itself made every look-up take the map's slow path for large values and
// every growth move ~150 bytes a slot (the map look-up was most of a cached decode).
type payloadCache struct {
	mu sync.Mutex
	m  map[string]*cachedPayload
}

type cachedPayload struct {
	subject string
	ep      endpoint.Endpoint
}

const maxCachedPayloads = 1 << 17

func (c *payloadCache) get(data []byte) (endpoint.Endpoint, string, bool) {
	c.mu.Lock()
	p, ok := c.m[string(data)]
	c.mu.Unlock()
	if !ok {
		return endpoint.Endpoint{}, "", false
	}
	return p.ep, p.subject, true
}

// reserve makes an empty cache room for n payloads.
func (c *payloadCache) reserve(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*cachedPayload, min(n, maxCachedPayloads))
	}
}

// put keeps ep, which must not be handed to anyone without detach.
func (c *payloadCache) put(data []byte, subject string, ep endpoint.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPayloads {
		c.m = make(map[string]*cachedPayload)
	}
	c.m[string(data)] = &cachedPayload{subject, ep}
}
