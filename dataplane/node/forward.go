package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

// Why a message copy was dropped (the "reason" label).
const (
	reasonQueueFull  = "queue_full"    // the link's or subscriber's queue was full
	reasonLinkBroken = "link_broken"   // the stream failed while sending it
	reasonLinkClosed = "link_closed"   // the link was deleted with the copy still queued
	reasonHops       = "hop_limit"     // its hop count ran out
	reasonNoRoute    = "no_route"      // nobody reachable subscribes to its name
	reasonMalformed  = "malformed"     // a peer sent a message with a bad name
	reasonOrigin     = "bad_origin"    // its origin names a node of this group that did not send it
	reasonUnacked    = "unacked"       // sent over a stream that broke before the far end acknowledged it
	reasonUnsub      = "unsubscribed"  // queued for a local subscriber that left
	reasonSlow       = "slow_consumer" // meant for, or queued for, a subscriber cut off for not keeping up
	reasonNoRequest  = "no_request"    // a reply to a request this node does not know (answered, expired)
)

// localSub is one local client's subscription.
type localSub struct {
	id   uint64
	name dataplane.Name
	ch   chan qmsg
	done chan struct{} // closed by unsubscribe
	once sync.Once
	m    *connMetrics
	// policy says what a copy that finds ch full does; onSlow, with
	// SlowConsumerDisconnect, ends the subscription (once, on a goroutine of its own:
	// the copy's sender, maybe a link's reader, must not wait for it).
	policy SlowConsumerPolicy
	onSlow func(*localSub)
	slow   atomic.Bool
	// onRequest records that the request with a token goes to this subscriber. It
	// runs before the request is queued: the subscriber may answer at once, and its
	// answer must find the request given to it.
	onRequest func(token string, s *localSub)
	// err is why the node ended the subscription (nil: the client or a shutdown did);
	// written before done closes.
	err error

	// mu orders deliveries against the end: a copy is in ch when the subscriber's
	// stream drains it (and counts it), or refused.
	mu     sync.RWMutex
	closed bool

	// gate lets a copy that comes alone be written inline (inline.go); under its mu,
	// the delivery it is sent as. delivered counts the copies sent.
	gate      inlineGate
	inlineOut deliveryOut
	one       [1]*msg
	delivered prometheus.Counter
}

// end stops deliveries and counts and releases what was still queued. why, when not
// nil, is why the node ended it; the client's stream ends with it.
func (s *localSub) end(why error) {
	s.once.Do(func() {
		s.err = why
		close(s.done)
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		reason := reasonUnsub
		if s.slow.Load() {
			reason = reasonSlow
		}
		for {
			select {
			case q := <-s.ch:
				s.gate.queued.Add(-1)
				s.m.dropped(reason).Inc()
				q.cu.release()
			default:
				return
			}
		}
	})
}

func (s *localSub) tryDeliver(q qmsg) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.slow.Load() {
		return false
	}
	s.takesRequest(q)
	return s.writeInline(q) || s.queue(q, 0)
}

// queue puts q in the subscriber's queue, waiting up to wait for room.
func (s *localSub) queue(q qmsg, wait time.Duration) bool {
	q.cu.hold()
	s.gate.queued.Add(1)
	if sendWithin(s.ch, q, wait, s.done) {
		return true
	}
	s.gate.queued.Add(-1)
	q.cu.release()
	return false
}

// writeInline delivers q, in a delivery of its own, when nothing is queued before it
// and the subscriber's stream takes it at once (inline.go); false: q is to be queued.
func (s *localSub) writeInline(q qmsg) bool {
	if !q.alone {
		return false
	}
	f := s.gate.enter()
	if f == nil {
		return false
	}
	defer s.gate.mu.Unlock()
	s.one[0] = q.m
	s.inlineOut.msgs = s.one[:]
	ok := f.tryWriteMsg(&s.inlineOut)
	s.inlineOut.msgs, s.one[0] = nil, nil
	if ok {
		s.delivered.Inc()
	}
	return ok
}

// takesRequest records a request about to be queued for s. Called under s.mu's read
// lock, before the end (which takes the write lock) and so before the end looks for
// the requests given to s.
func (s *localSub) takesRequest(q qmsg) {
	if q.m.ReplyTo != "" && s.onRequest != nil {
		s.onRequest(q.m.ReplyTo, s)
	}
}

// deliver hands q to the subscriber, waiting up to wait for room; a copy that finds
// no room is dropped, counted, and with SlowConsumerDisconnect the subscriber is cut
// off.
func (s *localSub) deliver(q qmsg, wait time.Duration) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closed:
		s.m.dropped(reasonUnsub).Inc()
		return false
	case s.slow.Load():
		s.m.dropped(reasonSlow).Inc()
		return false
	}
	s.takesRequest(q)
	if s.writeInline(q) || s.queue(q, wait) {
		return true
	}
	if s.policy == SlowConsumerDisconnect {
		s.m.dropped(reasonSlow).Inc()
		if s.slow.CompareAndSwap(false, true) {
			go s.onSlow(s)
		}
	} else {
		s.m.dropped(reasonQueueFull).Inc()
	}
	return false
}

// outcome counts what became of one message.
type outcome struct {
	forwarded, dropped int
	routable           bool
}

// receive forwards q, a message that arrived over conn from. bad, when not nil, is
// why its name could not be read.
func (n *Node) receive(q qmsg, name dataplane.Name, bad error, from *conn) {
	m := q.m
	if bad != nil {
		from.drop(reasonMalformed, 1)
		return
	}
	// The copy is ours now: spend one hop on it before anyone else sees it, and
	// note the segments of the link it came in by, for the peers it may go to. No
	// node may give a message more hops than a message published here gets.
	m.TTL = min(m.TTL, n.cfg.MaxHops)
	if m.TTL > 0 {
		m.TTL--
	}
	if !from.kind.isPeer() {
		m.Segs = from.segments()
	}
	switch {
	case m.InReplyTo != "":
		n.routeReply(q)
		return
	case m.ReplyTo != "":
		n.forwardRequest(q, name, from)
		return
	}
	o := n.forward(q, name, from, 0)
	if !o.routable {
		n.metrics.dropped(reasonNoRoute).Inc()
	}
}

// forward sends m toward name's subscribers: every one of them for a broadcast, else
// one — a local subscriber first, then a peer with a local subscriber, then a route
// (a link, or a peer holding the link). wait is how long a full queue may hold the
// caller up (only local publishers wait).
func (n *Node) forward(q qmsg, name dataplane.Name, from *conn, wait time.Duration) outcome {
	m := q.m
	tg := n.tab.lookup(name, from)
	tg.routes = inSegments(without(tg.routes, from), m.Segs)
	hopsLeft := m.TTL > 0
	if !hopsLeft {
		if len(tg.peersLocal)+len(tg.routes)+len(tg.peersRouted) > 0 && len(tg.local) == 0 {
			n.metrics.dropped(reasonHops).Inc()
			return outcome{dropped: 1, routable: true}
		}
		tg.peersLocal, tg.routes, tg.peersRouted = nil, nil, nil
	}
	if m.Broadcast {
		return n.broadcast(q, tg, wait)
	}
	var o outcome
	switch {
	case len(tg.local) > 0:
		o = anyLocal(q, tg.local, &n.rr, wait)
	case len(tg.peersLocal) > 0:
		o = anyConn(q, tg.peersLocal, nil, &n.rr, wait)
	case len(tg.routes)+len(tg.peersRouted) > 0:
		o = anyConn(q, tg.routes, tg.peersRouted, &n.rr, wait)
	default:
		return outcome{}
	}
	n.count(o)
	return o
}

func (n *Node) count(o outcome) {
	if o.forwarded > 0 {
		n.metrics.forwarded.Add(float64(o.forwarded))
	}
}

// broadcast hands q to every target. Those with room take it first; only then may a
// full one hold the caller up (wait), so that a subscriber or link that does not keep
// up never delays the copies of the others.
func (n *Node) broadcast(q qmsg, tg targets, wait time.Duration) outcome {
	var (
		o         outcome
		fullSubs  []*localSub
		fullConns []*conn
	)
	for _, s := range tg.local {
		if s.tryDeliver(q) {
			o.tally(true)
		} else {
			fullSubs = append(fullSubs, s)
		}
	}
	for _, set := range [][]*conn{tg.peersLocal, tg.peersRouted, tg.routes} {
		for _, c := range set {
			if c.tryEnqueue(q) {
				o.tally(true)
			} else {
				fullConns = append(fullConns, c)
			}
		}
	}
	for _, s := range fullSubs {
		o.tally(s.deliver(q, wait))
	}
	for _, c := range fullConns {
		o.tally(c.enqueue(q, wait))
	}
	n.count(o)
	return o
}

func (o *outcome) tally(ok bool) {
	o.routable = true
	if ok {
		o.forwarded++
	} else {
		o.dropped++
	}
}

// anyLocal gives m to one subscriber, round robin, skipping full ones; when all are
// full, the one whose turn it was waits (and drops, counted).
func anyLocal(q qmsg, subs []*localSub, rr *atomic.Uint64, wait time.Duration) outcome {
	start := int(rr.Add(1) % uint64(len(subs)))
	for i := range subs {
		if subs[(start+i)%len(subs)].tryDeliver(q) {
			return outcome{forwarded: 1, routable: true}
		}
	}
	var o outcome
	o.tally(subs[start].deliver(q, wait))
	return o
}

// anyConn is anyLocal for connections, over a and b together.
func anyConn(q qmsg, a, b []*conn, rr *atomic.Uint64, wait time.Duration) outcome {
	k := len(a) + len(b)
	at := func(i int) *conn {
		if i < len(a) {
			return a[i]
		}
		return b[i-len(a)]
	}
	start := int(rr.Add(1) % uint64(k))
	for i := range k {
		if at((start + i) % k).tryEnqueue(q) {
			return outcome{forwarded: 1, routable: true}
		}
	}
	var o outcome
	o.tally(at(start).enqueue(q, wait))
	return o
}

// inSegments keeps the links that share a segment with segs (all of them when segs is
// empty: the message was published in this group). A link without segments is in
// every one.
func inSegments(cs []*conn, segs []string) []*conn {
	if len(segs) == 0 {
		return cs
	}
	var out []*conn
	for i, c := range cs {
		ok := sharesSegment(c.segments(), segs)
		switch {
		case !ok && out == nil:
			out = append(make([]*conn, 0, len(cs)), cs[:i]...)
		case ok && out != nil:
			out = append(out, c)
		}
	}
	if out == nil {
		return cs
	}
	return out
}

func sharesSegment(a, b []string) bool {
	if len(a) == 0 {
		return true
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func without(cs []*conn, c *conn) []*conn {
	if c == nil {
		return cs
	}
	for i, x := range cs {
		if x == c {
			out := make([]*conn, 0, len(cs)-1)
			return append(append(out, cs[:i]...), cs[i+1:]...)
		}
	}
	return cs
}
