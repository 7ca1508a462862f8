package jetstream

import (
	"context"

	"github.com/switchboard-mesh/switchboard/registry"
)

// drv is the driver behind a registry the package opened.
func drv(r *registry.Front) *driver { return r.Driver().(*driver) }

// ReadPaths names every way a List can read the stream, for tests that must hold
// for each.
var ReadPaths = []string{pathConsumer.String(), pathMultiLast.String(), pathDirectSeq.String()}

// ForceReadPath makes every List of r read by the named path (one of ReadPaths).
// Call it before r is used.
func ForceReadPath(r *registry.Front, name string) {
	for _, p := range []readPath{pathConsumer, pathMultiLast, pathDirectSeq} {
		if p.String() == name {
			drv(r).forcePath = p
			return
		}
	}
	panic("unknown read path " + name)
}

// SetMultiLastMaxBytes caps the bytes one multi_last answer carries, so tests can
// make the server cut a page short. Call it before r is used.
func SetMultiLastMaxBytes(r *registry.Front, n int) { drv(r).multiLastMaxBytes = n }

// Fallbacks is how many lookups multi_last could not serve.
func Fallbacks(r *registry.Front) uint64 { return drv(r).fallbacks.Load() }

// PretendWritten makes r believe one of its writes was acknowledged at seq, as if a
// server that had not read that far had answered its lookups.
func PretendWritten(r *registry.Front, seq uint64) { drv(r).noteWritten(seq) }

// Undecodable is the driver's count of messages that were neither an entry nor a
// removal.
func Undecodable(r *registry.Front) uint64 { return drv(r).Undecodable() }

// MakeFirst empties r's cache of decoded payloads and makes its next List decode
// every payload, without caching them, as a new registry's first List does.
func MakeFirst(r *registry.Front) {
	d := drv(r)
	d.cache.mu.Lock()
	d.cache.m = nil
	d.cache.mu.Unlock()
	d.listed.Store(false)
}

// CachedPayloads is how many decoded payloads r's cache holds.
func CachedPayloads(r *registry.Front) int {
	c := &drv(r).cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Reaped is how many held entries r's reaper removed.
func Reaped(r *registry.Front) uint64 { return drv(r).Reaped() }

// LivenessSubject is the subject of hold id's liveness messages in r's stream.
func LivenessSubject(r *registry.Front, id registry.HoldID) string { return drv(r).subj.liveness(id) }

// ReapIfStill removes the held entry on subject as the reaper does, expecting the
// subject's last sequence to be seq, and returns how many entries it removed.
func ReapIfStill(ctx context.Context, r *registry.Front, subject string, seq uint64) (int, error) {
	d := drv(r)
	s, err := d.js.Stream(ctx, d.cfg.Name)
	if err != nil {
		return 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return 0, err
	}
	return d.removeHeld(ctx, []reapable{{subject: subject, seq: seq, h: m.Header, data: m.Data}})
}
