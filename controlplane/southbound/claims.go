package southbound

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// DefaultProbeTimeout bounds the wait for a live session's answer when a caller that
// does not prove the same identity claims its node id. A node answers in a round
// trip; one that stays silent this long is treated as gone.
const DefaultProbeTimeout = 5 * time.Second

// holder is what a caller proved about itself when it registered.
type holder struct {
	peer string // host:port, for logs; its host stands in for an identity when none is proven
	cert string // the verified client certificate's identity; "" without mTLS
	reg  string // the identity registration auth proved; "" under noop
}

// callerOf reads what the stream's caller proved: its address and the identity of
// its verified client certificate, if any. reg comes from registration auth.
func callerOf(ctx context.Context, reg string) holder {
	h := holder{reg: reg}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return h
	}
	if p.Addr != nil {
		h.peer = p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		// The first name: the SPIFFE ID (URI SAN), else the DNS SAN, else the CN.
		if ids := access.LeafIdentities(ti.State.VerifiedChains[0][0]); len(ids) > 0 {
			h.cert = ids[0].String()
		}
	}
	return h
}

func (h holder) proven() bool { return h.cert != "" || h.reg != "" }

// sameAs reports whether o proves to be the same holder as h: the same verified
// identities when either proved one; otherwise the same peer host, the only trace
// an unauthenticated caller leaves, and one a node restarted in place keeps.
func (h holder) sameAs(o holder) bool {
	if h.proven() || o.proven() {
		return h.cert == o.cert && h.reg == o.reg
	}
	a, b := host(h.peer), host(o.peer)
	return a != "" && a == b
}

// identity names what h proved, for logs.
func (h holder) identity() string {
	var ids []string
	for _, id := range []string{h.cert, h.reg} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ",")
}

func host(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return h
}

// replacement is a live session a registration takes over, and why it may.
type replacement struct {
	old    *session
	reason string
}

// admit decides whether caller may register nodeID. A live session is replaced by a
// caller that proves the same identity; where neither proved one, by a caller from the
// same host, or from another once the session fails to answer a request (its process
// is gone or hung, or its connection broke unnoticed). Otherwise the caller is refused
// with AlreadyExists and the session keeps the node id. The caller must
// hold the node id's claim lock.
func (s *Server) admit(ctx context.Context, nodeID string, caller holder) (*replacement, error) {
	old := s.live(nodeID)
	switch {
	case old == nil:
		return nil, nil
	case old.who.sameAs(caller) && caller.proven():
		return &replacement{old, "same identity"}, nil
	case old.who.sameAs(caller):
		return &replacement{old, "same peer host, and neither proved an identity"}, nil
	case !old.who.proven() && !caller.proven() && !s.answers(ctx, old):
		// Neither proved an identity, so the host is all there is to go by, and a node
		// restarted on another host looks like this: let it in once the old session
		// is silent. Between proven identities, silence proves nothing.
		return &replacement{old, fmt.Sprintf("the live session did not answer within %s", s.o.ProbeTimeout)}, nil
	}
	s.o.Logger.Warn("registration refused: the node id is held by a live session that another identity registered",
		"node", nodeID, "peer", caller.peer, "identity", caller.identity(),
		"holder_session", old.id, "holder_peer", old.peer, "holder_identity", old.who.identity())
	return nil, status.Errorf(codes.AlreadyExists, "node %s is registered by a live session of another identity: "+
		"it is replaced only by a caller that proves the same identity, or once it stops answering", nodeID)
}

// answers reports whether sess's node answers a connection list request within the
// probe timeout.
func (s *Server) answers(ctx context.Context, sess *session) bool {
	ctx, cancel := context.WithTimeout(ctx, s.o.ProbeTimeout)
	defer cancel()
	_, err := s.o.Streams.Request(ctx, sess.nodeID, &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}},
	})
	return err == nil
}

// logReplaced says, at warn level, which session a registration took over, from and
// for whom.
func (s *Server) logReplaced(sess *session, r *replacement) {
	s.o.Logger.Warn("node registered while its previous stream is still open: the previous stream is closed as replaced; "+
		"if this repeats, two processes use the same node id",
		"node", sess.nodeID, "reason", r.reason,
		"session", sess.id, "peer", sess.peer, "identity", sess.who.identity(),
		"replaced_session", r.old.id, "replaced_peer", r.old.peer, "replaced_identity", r.old.who.identity())
}

// live returns the session registered for nodeID while its stream is open.
func (s *Server) live(nodeID string) *session {
	s.mu.Lock()
	sess := s.sessions[nodeID]
	s.mu.Unlock()
	if sess == nil || sess.st.Err() != nil {
		return nil
	}
	return sess
}

func (s *Server) track(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[sess.nodeID] = sess
}

func (s *Server) forget(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.nodeID] == sess {
		delete(s.sessions, sess.nodeID)
	}
}

// nodeLocks serialises the registrations of each node id, so that deciding whether a
// caller may take the node id and installing its session are one step.
type nodeLocks struct {
	mu    sync.Mutex
	locks map[string]*nodeLock
}

type nodeLock struct {
	held chan struct{} // holds a token while locked
	refs int           // holders and waiters; the entry goes at zero
}

// lock takes the lock of key, waiting at most as long as ctx.
func (l *nodeLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*nodeLock{}
	}
	nl := l.locks[key]
	if nl == nil {
		nl = &nodeLock{held: make(chan struct{}, 1)}
		l.locks[key] = nl
	}
	nl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if nl.refs--; nl.refs == 0 {
			delete(l.locks, key)
		}
	}
	select {
	case nl.held <- struct{}{}:
		return func() { <-nl.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
