package agent

// GateInput is what the publish gate looks at for one entry.
type GateInput struct {
	// Entries is how many entries the agent has (the manifest's and other sources').
	Entries int
	// Held is why the entry's source holds it back ("pod not Ready"); empty when it
	// does not.
	Held string
	// NoOp is dry-run mode: the agent decides but never writes.
	NoOp bool
	// ApplyFailed says the last (re)load of the manifest failed.
	ApplyFailed bool
	// ChecksOK says every health check of the entry passes; an entry without checks
	// passes.
	ChecksOK bool
	// ChecksPending says that the checks which do not pass have not failed either
	// since they started or last passed (check.Tracker.Pending): they have no result
	// yet, or are passing on their way to the rise threshold.
	ChecksPending bool
}

// Reasons the gate stays closed.
const (
	ReasonNoEntries   = "no entries"
	ReasonNoOp        = "dry-run"
	ReasonApplyFailed = "last apply failed"
	ReasonUnhealthy   = "health checks failing"
	ReasonPending     = "waiting for health checks to pass"
)

// Gate is the publish gate (docs/agent.md): publish only when there are
// entries, the agent is not in no-op mode, the entry's source does not hold it, the last apply did not fail, and every
// health check is OK. It is conservative: when it says no, it says why.
func Gate(in GateInput) (open bool, reason string) {
	switch {
	case in.Entries == 0:
		return false, ReasonNoEntries
	case in.NoOp:
		return false, ReasonNoOp
	case in.Held != "":
		return false, in.Held
	case in.ApplyFailed:
		return false, ReasonApplyFailed
	case !in.ChecksOK && in.ChecksPending:
		return false, ReasonPending
	case !in.ChecksOK:
		return false, ReasonUnhealthy
	}
	return true, ""
}
