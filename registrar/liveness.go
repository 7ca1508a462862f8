package registrar

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// liveness keeps alive the entries agents register with a session, for as long as
// a watch stream of that session is open to this replica, instead of each refresh
// reaching the backend. The replica holds one liveness record on the backend
// (registry.Holder: an etcd lease); every entry it holds is written once, under it.
//
//   - An agent whose stream ends has its entries' TTL to come back (to this replica,
//     or to another that takes them over by registering them under its own hold);
//     then this replica removes them, only if they are still under its hold.
//   - When this replica dies, its hold runs out LivenessTTL after its last renewal;
//     agents re-home within it and their new replica takes their entries over.
//   - An entry a live session holds that the backend lost (the hold's record ran
//     out during a partition, or another writer removed it) is registered again.
type liveness struct {
	mu       sync.Mutex
	hold     registry.HoldID // empty: this replica holds nothing (yet, or at all)
	sessions map[string]*session
	keys     map[endpoint.Key]*heldEntry
	// streams maps each open watch stream with a session to it (kept here, not on
	// the watcher: an idle watcher's size is what 10,000 of them cost).
	streams map[*hub.Watcher]string
}

// A session is one agent's: the streams it has open here and the entries it holds.
type session struct {
	streams int
	lost    time.Time // when its last stream ended; zero while one is open
	keys    map[endpoint.Key]struct{}
}

type heldEntry struct {
	session *session
	ep      endpoint.Endpoint
	// written is when the entry was last written under the hold, Unix seconds: a
	// backend whose held entries also expire on their own (registry.HoldRefresher)
	// needs each written again before then.
	written int64
}

func newLiveness() *liveness {
	return &liveness{sessions: map[string]*session{}, keys: map[endpoint.Key]*heldEntry{}, streams: map[*hub.Watcher]string{}}
}

// maxSessionLen bounds a session ID; see WatchEndpointsRequest.session.
const maxSessionLen = 64

// validSession checks a session ID sent by a caller (empty is none).
func validSession(s string) error {
	if len(s) > maxSessionLen {
		return status.Errorf(codes.InvalidArgument, "session: longer than %d characters", maxSessionLen)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return status.Errorf(codes.InvalidArgument, "session %q: only letters, digits, '-' and '_'", s)
		}
	}
	return nil
}

// opened counts w, a watch stream of session id (a key the caller's identity is
// part of, so that no other caller can keep its entries alive).
func (l *liveness) opened(id string, w *hub.Watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.streams[w] = id
	s := l.sessions[id]
	if s == nil {
		s = &session{keys: map[endpoint.Key]struct{}{}}
		l.sessions[id] = s
	}
	s.streams++
	s.lost = time.Time{}
}

// closed uncounts w if it is a stream of a session; the session's last starts its
// entries' countdown.
func (l *liveness) closed(w *hub.Watcher, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := l.streams[w]
	if !ok {
		return
	}
	delete(l.streams, w)
	s := l.sessions[id]
	if s == nil {
		return
	}
	if s.streams--; s.streams == 0 {
		s.lost = now
	}
}

// holds reports whether registrations of session id are to be written under the
// hold: this replica holds, and a stream of the session is open here.
func (l *liveness) holds(id string) bool {
	if id == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[id]
	return l.hold != "" && s != nil && s.streams > 0
}

// holding reports whether this replica has its hold.
func (l *liveness) holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold != ""
}

// setHold starts holding under id.
func (l *liveness) setHold(id registry.HoldID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold = id
}

// mark puts the registrations among ops that need keeping alive (a positive TTL)
// under the hold.
func (l *liveness) mark(ops []registry.Op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range ops {
		if ops[i].Kind == registry.OpRegister && ops[i].Endpoint.TTL.Duration() > 0 {
			ops[i].Hold = l.hold
		}
	}
}

// took records the accepted writes of session id: held registrations are kept alive
// by it from now on; every other write of a key ends its holding here.
func (l *liveness) took(id string, ops []registry.Op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[id]
	now := time.Now().Unix()
	for _, op := range ops {
		k := op.Endpoint.Key()
		l.drop(k)
		if op.Hold != "" && s != nil {
			s.keys[k] = struct{}{}
			l.keys[k] = &heldEntry{session: s, ep: op.Endpoint, written: now}
		}
	}
}

// forget ends the holding of the keys of ops (written without a session).
func (l *liveness) forget(ops []registry.Op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.keys) == 0 {
		return
	}
	for _, op := range ops {
		l.drop(op.Endpoint.Key())
	}
}

func (l *liveness) drop(k endpoint.Key) {
	if e := l.keys[k]; e != nil {
		delete(e.session.keys, k)
		delete(l.keys, k)
	}
}

// expired takes the entries whose session's streams ended at least their TTL ago,
// and returns their removals: conditional on the hold, so that an entry another
// replica took over stays. Sessions with nothing left are forgotten.
func (l *liveness) expired(now time.Time) []registry.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []registry.Op
	for id, s := range l.sessions {
		if s.streams > 0 {
			continue
		}
		for k := range s.keys {
			e := l.keys[k]
			if now.Sub(s.lost) >= e.ep.TTL.Duration() {
				out = append(out, registry.Op{Kind: registry.OpUnregister, Endpoint: e.ep, Hold: l.hold})
				l.drop(k)
			}
		}
		if len(s.keys) == 0 {
			delete(l.sessions, id)
		}
	}
	return out
}

// heldOp is the registration, under the hold, of an entry of a live session, and
// when it was last written (Unix seconds).
type heldOp struct {
	op      registry.Op
	written int64
}

// live returns the registrations of the entries of sessions with a stream open
// here: restore checks that the snapshot still has them, and writes again those
// due on a backend whose held entries also expire on their own.
func (l *liveness) live() []heldOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []heldOp
	for _, e := range l.keys {
		if e.session.streams > 0 {
			out = append(out, heldOp{registry.Op{Kind: registry.OpRegister, Endpoint: e.ep, Hold: l.hold}, e.written})
		}
	}
	return out
}

// wrote notes the held entries of ops written at the Unix second at.
func (l *liveness) wrote(ops []registry.Op, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, op := range ops {
		if e := l.keys[op.Endpoint.Key()]; e != nil {
			e.written = at
		}
	}
}

// notHeld returns the ops whose keys this replica does not hold now.
func (l *liveness) notHeld(ops []registry.Op) []registry.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := ops[:0]
	for _, op := range ops {
		if l.keys[op.Endpoint.Key()] == nil {
			out = append(out, op)
		}
	}
	return out
}

// count is how many entries and sessions this replica holds (for its metrics).
func (l *liveness) count() (entries, sessions int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys), len(l.sessions)
}

// sessionKey is the key of a caller's session: its identity (when the registrar
// authorizes callers) and the ID it sent.
func (r *Registrar) sessionKey(ctx context.Context, id string) string {
	if id == "" {
		return ""
	}
	if a := r.cfg.Authorizer; a != nil {
		if who, ok := a.callerOf(ctx); ok {
			return fmt.Sprintf("%s|%s", who.identity, id)
		}
	}
	return id
}

// acceptHeld is accept for the writes of a caller's session: registrations are put
// under the hold when this replica keeps them alive for the session (reported by
// held), and every write updates what is held.
func (r *Registrar) acceptHeld(ctx context.Context, ops []registry.Op, session string) (v token.Version, held bool, err error) {
	held = ops[0].Kind == registry.OpRegister && r.live.holds(session)
	if held {
		r.live.mark(ops)
	}
	if v, err = r.accept(ctx, ops); err != nil {
		return v, false, err
	}
	if held {
		r.live.took(session, ops)
	} else {
		r.live.forget(ops)
	}
	return v, held, nil
}
