package kubesync

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"sync"
)

// refusals remembers, by service, the writes the API server refused as invalid
// (422): which object, and which version of it. Such a write fails the same way
// every time, so it is not made again until what export wants of the object, or
// the object itself, changes; meanwhile the object keeps the last version the API
// server took, or does not exist. The service's other objects are written as
// usual. Like notes, a service's record is replaced at each sync, so it holds only
// what the last sync found refused.
type refusals struct {
	mu  sync.Mutex
	svc map[string]map[string]string // service → "kind/name" → version
}

// refusalRecord is one sync's view of its service's refusals.
type refusalRecord struct {
	prev, next map[string]string
	seen       map[string]bool
}

// begin starts a sync of svc.
func (r *refusals) begin(svc string) *refusalRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &refusalRecord{prev: r.svc[svc], next: map[string]string{}, seen: map[string]bool{}}
}

// end stores what the sync of svc recorded. A sync that failed may not have
// reached every object: those it did not keep what was recorded of them.
func (r *refusals) end(svc string, rec *refusalRecord, failed bool) {
	if failed {
		for obj, v := range rec.prev {
			if !rec.seen[obj] {
				rec.next[obj] = v
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(rec.next) > 0:
		if r.svc == nil {
			r.svc = map[string]map[string]string{}
		}
		r.svc[svc] = rec.next
	default:
		delete(r.svc, svc)
	}
}

// known reports whether the API server refused version v of obj before; if so
// the refusal is kept.
func (rec *refusalRecord) known(obj, v string) bool {
	rec.seen[obj] = true
	if rec.prev[obj] == v {
		rec.next[obj] = v
		return true
	}
	return false
}

// refusedWrite records that the API server refused version v of the object kind
// name, and logs and counts it: once, as it is not written again.
func (e *exporter) refusedWrite(rec *refusalRecord, kind, name, v string, err error) {
	rec.next[kind+"/"+name] = v
	e.m.refused.WithLabelValues(kind).Inc()
	e.log.Warn("the API server refused the object as invalid: this version of it will not be written again",
		"kind", kind, "name", name, "err", err)
}

// version names what a write sets (parts) on top of which version of the object
// (resourceVersion rv, "" for a create).
func version(rv string, parts ...any) string {
	b, err := json.Marshal(parts)
	if err != nil {
		// Not reached: API objects marshal. An empty version matches nothing,
		// so the write is simply made.
		return ""
	}
	h := fnv.New64a()
	h.Write(b)
	return strconv.FormatUint(h.Sum64(), 16) + "@" + rv
}
