package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Registry stores endpoints.
//
// Apply validates the whole batch before writing any of it: one invalid endpoint fails
// the call with an error matching endpoint.ErrInvalid and nothing is stored. Within a
// batch the last operation on a key wins, so registering and unregistering one key in
// the same batch nets out. Unregistering a key that is not stored is not an error.
//
// List returns the endpoints that match the filter, sorted as endpoint.Sort does;
// expired entries are never returned. Callers must not modify the result: a backend
// may share it with its cache (the registrar client does, so that a cached read costs
// no allocation); Clone what you need to change.
//
// A filter that could never match fails List (and Watch) with endpoint.ErrInvalid.
//
// Close ends the calls in flight (they fail with ErrClosed) and every watch, waits for
// them and releases the backend; it is idempotent, and calls after it fail with
// ErrClosed. Front holds these rules for every backend.
type Registry interface {
	Apply(ctx context.Context, ops []Op) error
	List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error)
	Close() error
}

// Watcher is implemented by backends with a change feed (a Front always has Watch; it
// fails with ErrNoWatch when its backend has none).
//
// Watch first sends every matching endpoint as Added, then one Synced event, then each
// change as it happens, in the order the backend applied them. Removals include
// expiries; an entry registered again after it expired is Removed, then Added. Events
// fit what the watcher holds: Added only for an endpoint it does not hold, Updated and
// Removed only for one it does. The channel is closed when ctx ends, when the registry
// closes, or when the backend gives the watch up. A backend that must re-read its state
// (after a compaction or reconnect) sends only the differences, so a consumer never
// sees an event twice or misses one. A consumer that falls far behind may likewise get
// each endpoint's net change instead of every step (buffers are bounded): the events it
// gets always lead it to the backend's state.
type Watcher interface {
	Watch(ctx context.Context, f endpoint.Filter) (<-chan Event, error)
}

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpRegister creates or replaces the endpoint with the op's key.
	OpRegister OpKind = iota + 1
	// OpUnregister removes the endpoint with the op's key; only key fields are read.
	OpUnregister
)

func (k OpKind) String() string {
	switch k {
	case OpRegister:
		return "register"
	case OpUnregister:
		return "unregister"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one write in a batch.
type Op struct {
	Kind     OpKind
	Endpoint endpoint.Endpoint
	// Hold, when set, keeps the entry alive by that hold instead of its TTL (see
	// Holder); an Unregister with a Hold removes the entry only while it is under it.
	Hold HoldID
}

// Register returns an op that stores e.
func Register(e endpoint.Endpoint) Op { return Op{Kind: OpRegister, Endpoint: e} }

// Unregister returns an op that removes the endpoint with e's key.
func Unregister(e endpoint.Endpoint) Op { return Op{Kind: OpUnregister, Endpoint: e} }

// EventType says what happened to an endpoint.
type EventType uint8

const (
	Added EventType = iota + 1
	Updated
	Removed
	// Synced marks the end of the initial state: every endpoint that matched when the
	// watch began has been sent. It carries no endpoint.
	Synced
	// Reread is sent by a WatchDriver, never to a watcher: the whole state follows
	// again, as Added events ended by Synced, and the Front sends the watcher only
	// its differences from what it holds. It carries no endpoint.
	Reread
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Removed:
		return "removed"
	case Synced:
		return "synced"
	case Reread:
		return "reread"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one change seen by a watcher. For Removed only the key fields of Endpoint
// are guaranteed to be set.
type Event struct {
	Type     EventType
	Endpoint endpoint.Endpoint
}

// Sentinel errors that callers branch on.
var (
	// ErrClosed is returned by calls on a closed registry.
	ErrClosed = errors.New("registry closed")
	// ErrUnknownBackend is returned by Open for a name nobody registered.
	ErrUnknownBackend = errors.New("unknown registry backend")
	// ErrNoWatch is returned when a backend has no change feed.
	ErrNoWatch = errors.New("registry backend has no change feed")
	// ErrUnavailable wraps failures to reach the backend, which callers may retry.
	ErrUnavailable = errors.New("registry backend unavailable")
	// ErrBadParam is matched by errors about a backend parameter: unknown to the
	// backend, or a value that does not parse. Commands report it as bad usage.
	ErrBadParam = errors.New("bad registry parameter")
)

// ApplyError reports the endpoints of a batch that were not written.
type ApplyError struct {
	Failed []endpoint.Key
	Err    error
}

func (e *ApplyError) Error() string {
	keys := make([]string, 0, min(len(e.Failed), 5))
	for i, k := range e.Failed {
		if i == 5 {
			keys = append(keys, fmt.Sprintf("and %d more", len(e.Failed)-5))
			break
		}
		keys = append(keys, k.String())
	}
	return fmt.Sprintf("%d endpoint(s) not written (%s): %v", len(e.Failed), strings.Join(keys, ", "), e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Validate checks every op of a batch: registrations in full, unregistrations by key.
// The error names the op's position and the broken field.
func Validate(ops []Op) error {
	for i, op := range ops {
		var err error
		switch op.Kind {
		case OpRegister:
			err = op.Endpoint.Validate()
		case OpUnregister:
			err = op.Endpoint.Key().Validate()
		default:
			err = fmt.Errorf("%w: op kind %d is neither register nor unregister", endpoint.ErrInvalid, op.Kind)
		}
		if err != nil {
			return fmt.Errorf("op %d (%s): %w", i, op.Kind, err)
		}
	}
	return nil
}

// Coalesce keeps the last op per key, in the order of each key's first appearance.
// Backends that cannot write one key twice in a transaction (DynamoDB) and batching
// writers use it to net out a batch.
// A batch without a repeated key, the usual case, is returned as it is rather than
// copied (an op carries a whole endpoint).
func Coalesce(ops []Op) []Op {
	if len(ops) < 2 {
		return ops
	}
	idx := make(map[endpoint.Key]int, len(ops))
	for i, op := range ops {
		k := op.Endpoint.Key()
		if _, ok := idx[k]; ok {
			return coalesceFrom(ops, idx, i)
		}
		idx[k] = i
	}
	return ops
}

// coalesceFrom is Coalesce past the first repeated key, at ops[first]: ops before it
// are all distinct and idx holds their positions.
func coalesceFrom(ops []Op, idx map[endpoint.Key]int, first int) []Op {
	out := append(make([]Op, 0, len(ops)), ops[:first]...)
	for _, op := range ops[first:] {
		k := op.Endpoint.Key()
		if i, ok := idx[k]; ok {
			out[i] = op
			continue
		}
		idx[k] = len(out)
		out = append(out, op)
	}
	return out
}
