package jetstream

// ReadPaths names every way a List can read the stream, for tests that must hold
// for each.
var ReadPaths = []string{pathConsumer.String(), pathMultiLast.String(), pathDirectSeq.String()}

// ForceReadPath makes every List of r read by the named path (one of ReadPaths).
// Call it before r is used.
func ForceReadPath(r *Registry, name string) {
	for _, p := range []readPath{pathConsumer, pathMultiLast, pathDirectSeq} {
		if p.String() == name {
			r.forcePath = p
			return
		}
	}
	panic("unknown read path " + name)
}

// SetMultiLastMaxBytes caps the bytes one multi_last answer carries, so tests can
// make the server cut a page short. Call it before r is used.
func SetMultiLastMaxBytes(r *Registry, n int) { r.multiLastMaxBytes = n }

// Fallbacks is how many lookups multi_last could not serve.
func Fallbacks(r *Registry) uint64 { return r.fallbacks.Load() }

// PretendWritten makes r believe one of its writes was acknowledged at seq, as if a
// server that had not read that far had answered its lookups.
func PretendWritten(r *Registry, seq uint64) { r.noteWritten(seq) }
