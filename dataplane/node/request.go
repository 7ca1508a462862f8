package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// Request/reply. A request is a message with a reply token, "{node}#{n}": the node
// it was made at and its number there. It is forwarded as an anycast message is (one
// subscriber, nearest first), and every node it passes remembers the token with the
// connection it came in by. The reply carries the token back: each node sends it over
// the connection it remembered, and forgets the token. No route to the requester is
// needed, so a reply costs no subscription round-trip.
//
// A node that cannot pass a request on (nobody subscribes, a full queue, no hops
// left), or whose subscriber leaves before answering, answers at once with a reply
// flagged no_responders: the requester learns it without waiting for its timeout.

// Errors of Request and Respond; the API maps them to status codes.
var (
	ErrNoResponders   = errors.New("no responders")
	ErrRequestTimeout = errors.New("request timed out")
	ErrNoRequest      = errors.New("no request waiting for an answer")
)

// Reply is the answer to a request.
type Reply struct {
	Payload []byte
	// Responder is the node of the subscriber that answered.
	Responder string
}

// reply is what comes back to a waiting requester.
type reply struct {
	Reply
	noResponders bool
	alone        bool // it came in a batch of its own (qmsg.alone)
}

// pending is a request this node made or passed on, until answered or expired.
type pending struct {
	name dataplane.Name
	// from is the way back; nil when the request was made here, and done gets the
	// reply.
	from *conn
	done func(reply)
	// sub is the local subscriber the request was given to, if any: when it leaves
	// before answering, the requester is told at once.
	sub     *localSub
	expires time.Time
}

// replyPaths are the node's pending requests by token.
type replyPaths struct {
	mu    sync.Mutex
	m     map[string]*pending
	swept time.Time
}

// add records p under token; false when the token is already known (a copy of the
// request that came round a loop).
func (r *replyPaths) add(token string, p *pending) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.swept) > time.Second {
		// Requests nobody answered: the requester gave up long ago.
		for k, q := range r.m {
			if now.After(q.expires) {
				delete(r.m, k)
			}
		}
		r.swept = now
	}
	if _, ok := r.m[token]; ok {
		return false
	}
	if r.m == nil {
		r.m = map[string]*pending{}
	}
	r.m[token] = p
	return true
}

// take removes and returns token's request (nil when unknown). answerable: only one
// a local subscriber was given.
func (r *replyPaths) take(token string, answerable bool) *pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.m[token]
	if p == nil || (answerable && p.sub == nil) {
		return nil
	}
	delete(r.m, token)
	return p
}

// gaveTo records that token's request goes to local subscriber s (the last one
// recorded wins: a full subscriber's turn passes to the next).
func (r *replyPaths) gaveTo(token string, s *localSub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.m[token]; p != nil {
		p.sub = s
	}
}

// of removes and returns the requests given to s.
func (r *replyPaths) of(s *localSub) map[string]*pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*pending{}
	for k, p := range r.m {
		if p.sub == s {
			out[k] = p
			delete(r.m, k)
		}
	}
	return out
}

// requestTimeout is the wait of a request asking for timeout (0: the default).
func requestTimeout(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	return min(timeout, MaxRequestTimeout)
}

// Request sends payload to one subscriber of name and waits up to timeout (0:
// DefaultRequestTimeout; at most MaxRequestTimeout) for its answer.
func (n *Node) Request(ctx context.Context, name dataplane.Name, payload []byte, timeout time.Duration) (Reply, error) {
	timeout = requestTimeout(timeout)
	wait := make(chan reply, 1)
	token, err := n.startRequest(name, payload, timeout, true, func(r reply) { wait <- r })
	if err != nil {
		return Reply{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-wait:
		return n.replied(name, r)
	case <-t.C:
	case <-ctx.Done():
	}
	if n.paths.take(token, false) == nil {
		// The answer was taken meanwhile: it is on its way to wait.
		return n.replied(name, <-wait)
	}
	if ctx.Err() != nil {
		return Reply{}, n.requestDone("timeout", ctx.Err())
	}
	return Reply{}, n.timedOut(name, timeout)
}

// startRequest sends a request made at this node, whose answer (or no_responders)
// goes to done. Unless it returns an error, done is called exactly once, by whoever
// takes the token from n.paths: the answer, a no_responders reply, or the caller
// giving up (its timeout), which then does not call done but reports the request's
// end itself. Both Request and RequestStream make their requests through it.
// alone: the request came in a batch of its own (qmsg.alone).
func (n *Node) startRequest(name dataplane.Name, payload []byte, timeout time.Duration, alone bool, done func(reply)) (string, error) {
	if err := checkComponents(name); err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrBadName, name, err)
	}
	if err := n.checkSize(payload); err != nil {
		n.metrics.requests.WithLabelValues("refused").Inc()
		return "", err
	}
	token := n.id + "#" + strconv.FormatUint(n.reqSeq.Add(1), 10)
	n.paths.add(token, &pending{name: name, done: done, expires: time.Now().Add(timeout)})
	n.metrics.published.Inc()
	raw := make([]byte, 0, publishedSize(name, len(payload), n.id)+tokenSize(wire.MessageFieldReplyTo, token))
	raw = appendPublished(raw, name, payload, false, n.id, n.seq.Add(1), time.Now().UnixNano())
	m := &msg{Raw: appendToken(raw, wire.MessageFieldReplyTo, token), TTL: n.cfg.MaxHops, ReplyTo: token}
	o := n.forward(qmsg{m: m, alone: alone}, name, nil, n.cfg.PublishWait)
	var outcome string
	var err error
	switch {
	case !o.routable:
		outcome, err = "no_responders", noResponders(name, "nobody reachable from node "+n.id+" subscribes to it")
	case o.forwarded == 0:
		outcome, err = "refused", fmt.Errorf("%w: %s dropped", ErrQueuesFull, name)
	}
	if err != nil && n.paths.take(token, false) != nil {
		return "", n.requestDone(outcome, err)
	}
	// Passed on; or refused, but a subscriber it was given to left meanwhile and done
	// gets the no_responders.
	return token, nil
}

// replied is the outcome of a request whose reply came.
func (n *Node) replied(name dataplane.Name, r reply) (Reply, error) {
	if r.noResponders {
		return Reply{}, n.requestDone("no_responders", noResponders(name, "the subscriber it went to left, or it found nobody to go to, before an answer"))
	}
	n.metrics.requests.WithLabelValues("answered").Inc()
	return r.Reply, nil
}

func (n *Node) timedOut(name dataplane.Name, timeout time.Duration) error {
	return n.requestDone("timeout", fmt.Errorf("%w: no answer to a request to %s within %s", ErrRequestTimeout, name, timeout))
}

func (n *Node) requestDone(outcome string, err error) error {
	n.metrics.requests.WithLabelValues(outcome).Inc()
	return err
}

func noResponders(name dataplane.Name, why string) error {
	return fmt.Errorf("%w for %s: %s", ErrNoResponders, name, why)
}

// tokenSize is the size of a reply token field.
func tokenSize(num protowire.Number, token string) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(len(token))
}

// appendToken appends a reply token field to a message's raw encoding.
func appendToken(b []byte, num protowire.Number, token string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, token)
}

// Respond answers request token, which a local subscriber of this node received.
func (n *Node) Respond(token string, payload []byte) error {
	return n.respond(token, payload, false, true)
}

// respond answers request token; borrowed: payload is not the caller's to give away
// (it is in a buffer of a stream's batch), and is copied if kept; alone: the answer
// came in a batch of its own (qmsg.alone).
func (n *Node) respond(token string, payload []byte, borrowed, alone bool) error {
	if err := n.checkSize(payload); err != nil {
		return err
	}
	p := n.paths.take(token, true)
	if p == nil {
		return fmt.Errorf("%w: request %q is not known on node %s (answered already, expired, or given to another node)", ErrNoRequest, token, n.id)
	}
	if borrowed && p.from == nil {
		payload = bytes.Clone(payload) // the requester's answer, kept until sent
	}
	n.sendReply(p, token, reply{Reply: Reply{Payload: payload, Responder: n.id}}, n.cfg.PublishWait, alone)
	return nil
}

// sendReply hands r to the requester, when it is on this node, or sends it back the
// way the request came.
func (n *Node) sendReply(p *pending, token string, r reply, wait time.Duration, alone bool) {
	if p.from == nil {
		r.alone = alone
		p.done(r) // the only reply it gets: p was taken
		return
	}
	// One allocation: room for the token and the no_responders flag.
	b := make([]byte, 0, publishedSize(p.name, len(r.Payload), r.Responder)+tokenSize(wire.MessageFieldInReplyTo, token)+2)
	b = appendPublished(b, p.name, r.Payload, false, r.Responder, n.seq.Add(1), time.Now().UnixNano())
	b = appendToken(b, wire.MessageFieldInReplyTo, token)
	if r.noResponders {
		b = protowire.AppendTag(b, wire.MessageFieldNoResponders, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	p.from.enqueue(qmsg{m: &msg{Raw: b, TTL: n.cfg.MaxHops, InReplyTo: token}, alone: alone}, wait)
}

// failRequest tells the requester of token that nobody will answer.
func (n *Node) failRequest(token string) {
	if p := n.paths.take(token, false); p != nil {
		n.sendReply(p, token, reply{Reply: Reply{Responder: n.id}, noResponders: true}, 0, false)
	}
}

// subscriberLeft fails the requests s was given and has not answered.
func (n *Node) subscriberLeft(s *localSub) {
	for token, p := range n.paths.of(s) {
		n.sendReply(p, token, reply{Reply: Reply{Responder: n.id}, noResponders: true}, 0, false)
	}
}

// forwardRequest passes on a request that came in over from, remembering the way
// back; one it cannot pass on is answered with no_responders at once.
func (n *Node) forwardRequest(q qmsg, name dataplane.Name, from *conn) {
	token := q.m.ReplyTo
	if !n.paths.add(token, &pending{name: name, from: from, expires: time.Now().Add(MaxRequestTimeout)}) {
		from.drop(reasonNoRoute, 1) // a copy of a request this node has passed on already
		return
	}
	o := n.forward(q, name, from, 0)
	switch {
	case !o.routable:
		n.metrics.dropped(reasonNoRoute).Inc()
		n.failRequest(token)
	case o.forwarded == 0:
		n.failRequest(token)
	}
}

// routeReply sends a reply that came in over a conn on toward its requester.
func (n *Node) routeReply(q qmsg) {
	p := n.paths.take(q.m.InReplyTo, false)
	switch {
	case p == nil:
		n.metrics.dropped(reasonNoRequest).Inc()
	case p.from != nil:
		p.from.enqueue(q, 0)
	default:
		r := decodeReply(q.m)
		r.alone = q.alone
		p.done(r)
	}
}

// decodeReply reads a reply that came back to the requester's node.
func decodeReply(m *msg) reply {
	// Only the three fields a requester gets are read, the last of each winning as in
	// protobuf; the payload is copied out of the batch's buffer, which goes back to the
	// pool. (proto.Unmarshal of the whole message was five allocations a reply.)
	var (
		payload, origin []byte
		noResponders    bool
	)
	for b := m.Raw; len(b) > 0; {
		num, typ, v, rest, err := wire.NextField(b)
		if err != nil {
			return reply{noResponders: true}
		}
		b = rest
		switch {
		case num == wire.MessageFieldPayload && typ == protowire.BytesType:
			payload = v
		case num == wire.MessageFieldOrigin && typ == protowire.BytesType:
			origin = v
		case num == wire.MessageFieldNoResponders && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return reply{noResponders: true}
			}
			noResponders = x != 0
		}
	}
	if !utf8.Valid(origin) {
		return reply{noResponders: true}
	}
	r := reply{Reply: Reply{Responder: string(origin)}, noResponders: noResponders}
	if len(payload) > 0 {
		r.Payload = bytes.Clone(payload)
	}
	return r
}

func requestStatus(err error) error {
	switch {
	case errors.Is(err, ErrNoResponders):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrRequestTimeout):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrNoRequest):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return publishStatus(err)
}

func (cs clientServer) Request(ctx context.Context, req *nodev1.RequestRequest) (*nodev1.RequestResponse, error) {
	name, err := nameFromProto(req.GetName())
	if err != nil {
		return nil, requestStatus(err)
	}
	r, err := cs.n.Request(ctx, name, req.GetPayload(), time.Duration(req.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return nil, requestStatus(err)
	}
	return &nodev1.RequestResponse{Payload: r.Payload, Responder: r.Responder}, nil
}

func (cs clientServer) Respond(_ context.Context, req *nodev1.RespondRequest) (*nodev1.RespondResponse, error) {
	if err := cs.n.Respond(req.GetReplyTo(), req.GetPayload()); err != nil {
		return nil, requestStatus(err)
	}
	return &nodev1.RespondResponse{}, nil
}
