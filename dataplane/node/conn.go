package node

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/keepalive"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// connKind says which end of which kind of stream a conn is.
type connKind uint8

const (
	linkOut connKind = iota // a control-plane link this node dialed
	linkIn                  // a control-plane link this node accepted
	peerOut                 // a peering this node dialed to a node of its group
	peerIn                  // a peering a node of the group dialed to this one
)

func (k connKind) isPeer() bool { return k == peerOut || k == peerIn }

// stream is what both ends of LinkService.Link have in common. Batches go through
// SendMsg and RecvMsg in their wire form (wire.go), control frames as LinkFrames.
type stream interface {
	SendMsg(any) error
	RecvMsg(any) error
}

// Batching bounds: one stream send carries at most this many messages or bytes (but
// always at least one message).
const (
	maxBatchMessages = 256
	maxBatchBytes    = 256 << 10
)

// interest is one name this end asked the far end for (a route's subscription, or a
// peering's offer), replayed on every new stream until removed.
type interest struct {
	id    uint64
	local bool
	done  func(error) // pending ack callback; nil once acked
}

// conn is one connection between two nodes: a control-plane link or a peering within
// the group, dialed or accepted. It outlives the streams that carry it: a dialed conn
// redials after a break, an accepted link waits LinkGrace for its dialer to come back,
// and the queue and the interests carry over to the next stream.
type conn struct {
	n        *Node
	id       dataplane.ConnID
	kind     connKind
	endpoint string // the endpoint dialed (out), the dialer's node id (in)
	dialed   string // in: the endpoint the dialer dialed (what a claim reports)
	// keepalive: out, the gRPC keepalive of the conn's connection (linkKeepalive).
	keepalive keepalive.ClientParameters

	ctx    context.Context
	cancel context.CancelFunc
	msgs   chan qmsg
	wake   chan struct{} // something was added to ctrl, or an ack is due
	mp     atomic.Pointer[connMetrics]
	// segs are a link's segments (nil: none, or a peering): what came in over the link
	// may leave only over links of one of them.
	segs atomic.Pointer[[]string]

	// qmu orders enqueues against close: a copy is either in the queue when close
	// drains it (and counted there) or refused, never left behind uncounted.
	qmu     sync.RWMutex
	qclosed bool

	mu      sync.Mutex
	linkID  string
	remote  string // the far end's effective node id
	up      bool
	gen     uint64 // bumped for every stream attached
	ctrl    []*nodev1.LinkFrame
	out     map[dataplane.Name]*interest
	nextInt uint64
	in      map[uint64]dataplane.Name // interests the far end sent us, by its id
	closed  bool
	graceT  *time.Timer

	dropped      atomic.Uint64
	originWarned atomic.Bool

	// gate lets a copy that comes alone be written inline (inline.go); under its mu,
	// the stream state it is sent in, and the batch it is sent as.
	gate      inlineGate
	inlineSt  *streamState
	inlineOut batchOut
	one       [1]*msg
}

func (n *Node) newConn(kind connKind, linkID, endpoint, remote string) *conn {
	ctx, cancel := context.WithCancel(n.ctx)
	c := &conn{
		n: n, kind: kind, endpoint: endpoint, linkID: linkID, remote: remote,
		keepalive: linkKeepalive(0, 0), ctx: ctx, cancel: cancel,
		msgs: make(chan qmsg, n.cfg.QueueLen),
		wake: make(chan struct{}, 1),
		out:  map[dataplane.Name]*interest{},
		in:   map[uint64]dataplane.Name{},
	}
	c.setMetrics(n.metrics.forConn(c.label()))
	return c
}

func (c *conn) met() *connMetrics      { return c.mp.Load() }
func (c *conn) setSegments(s []string) { c.segs.Store(&s) }

// segments returns the link's segments (nil when it has none).
func (c *conn) segments() []string {
	if p := c.segs.Load(); p != nil {
		return *p
	}
	return nil
}
func (c *conn) setMetrics(m *connMetrics) { c.mp.Store(m) }

// label names the conn in metrics and logs.
func (c *conn) label() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kind.isPeer() {
		return "peer:" + c.remote
	}
	return c.linkID
}

func (c *conn) info() dataplane.ConnInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return dataplane.ConnInfo{ID: c.id, LinkID: c.linkID, Endpoint: c.endpoint, Inbound: c.kind == linkIn || c.kind == peerIn}
}

func (c *conn) isUp() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// enqueue hands q to the conn's queue; a full queue waits up to wait (0: not at all)
// and then drops the copy, counted.
func (c *conn) enqueue(q qmsg, wait time.Duration) bool {
	c.qmu.RLock()
	defer c.qmu.RUnlock()
	if c.qclosed {
		c.drop(reasonLinkClosed, 1)
		return false
	}
	if c.put(q, wait, c.ctx.Done()) {
		return true
	}
	c.drop(reasonQueueFull, 1)
	return false
}

// tryEnqueue hands q to the queue if there is room, without counting a refusal.
func (c *conn) tryEnqueue(q qmsg) bool {
	c.qmu.RLock()
	defer c.qmu.RUnlock()
	return !c.qclosed && c.put(q, 0, nil)
}

// put writes q inline or queues it, waiting up to wait for room unless done closes;
// false: refused, q's custody as it was. Callers hold qmu's read lock, the queue open.
func (c *conn) put(q qmsg, wait time.Duration, done <-chan struct{}) bool {
	if q.alone && c.writeInline(q) {
		return true
	}
	q.cu.hold()
	c.gate.queued.Add(1)
	if sendWithin(c.msgs, q, wait, done) {
		return true
	}
	c.gate.queued.Add(-1)
	q.cu.release()
	return false
}

// writeInline sends q, as a batch of its own, on the current stream when nothing is
// queued before it and the stream can take it at once (inline.go); false: q is to
// be queued.
func (c *conn) writeInline(q qmsg) bool {
	f := c.gate.enter()
	if f == nil {
		return false
	}
	defer c.gate.mu.Unlock()
	st := c.inlineSt
	var held []*custody
	if q.cu != nil {
		q.cu.hold()
		held = []*custody{q.cu}
	}
	c.one[0] = q.m
	seq := st.tx.next(1, held)
	c.inlineOut.msgs, c.inlineOut.seq = c.one[:], seq
	ok := f.tryWriteMsg(&c.inlineOut)
	c.inlineOut.msgs, c.one[0] = nil, nil
	if !ok {
		if st.tx.unsent(seq) {
			releaseAll(held)
		}
		return false
	}
	c.met().out.Add(1)
	return true
}

// inlineTo lets copies be written inline on s, a stream of state st, until the
// returned func is called.
func (c *conn) inlineTo(s stream, st *streamState) func() {
	f, ok := s.(*framed)
	if !ok || f.raw == nil {
		return func() {}
	}
	c.gate.mu.Lock()
	c.gate.f, c.inlineSt = f, st
	c.gate.mu.Unlock()
	return func() { c.gate.clear(f) }
}

// sendWithin sends q on ch if there is room, or else once room frees up within wait (0:
// no waiting) unless done closes first; it reports whether q was taken. The caller
// holds q's custody before (the receiver may release it at once) and, when q was not
// taken, counts the refusal if it must before releasing it, so that an ack never
// runs ahead of the count.
func sendWithin(ch chan<- qmsg, q qmsg, wait time.Duration, done <-chan struct{}) bool {
	select {
	case ch <- q:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ch <- q:
		return true
	case <-t.C:
	case <-done:
	}
	return false
}

// wakeWriter has the writer look at its control frames and acks.
func (c *conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) drop(reason string, k int) {
	c.dropped.Add(uint64(k))
	c.met().dropped(reason).Add(float64(k))
}

// pushCtrl queues a control frame for the current stream (or the next one). Control
// frames are few and never dropped. Callers hold c.mu.
func (c *conn) pushCtrlLocked(f *nodev1.LinkFrame) {
	c.ctrl = append(c.ctrl, f)
	c.wakeWriter()
}

// setInterest asks the far end for name (or changes its local flag); done, when not
// nil, gets the far end's ack. It reports whether the interest is new.
func (c *conn) setInterest(name dataplane.Name, local bool, done func(error)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if done != nil {
			go done(dataplane.ErrConnNotFound)
		}
		return false
	}
	it, ok := c.out[name]
	if ok && it.local == local {
		if done != nil {
			if it.done == nil {
				go done(nil)
			} else {
				prev := it.done
				it.done = func(err error) { prev(err); done(err) }
			}
		}
		return false
	}
	c.nextInt++
	it = &interest{id: c.nextInt, local: local, done: done}
	c.out[name] = it
	c.pushCtrlLocked(subscribeFrame(it, name))
	return !ok
}

func subscribeFrame(it *interest, name dataplane.Name) *nodev1.LinkFrame {
	return &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Subscribe{Subscribe: &nodev1.Interest{Id: it.id, Name: NameProto(name), Local: it.local}}}
}

// dropInterest withdraws name from the far end.
func (c *conn) dropInterest(name dataplane.Name) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.out[name]
	if !ok {
		return false
	}
	delete(c.out, name)
	if it.done != nil {
		go it.done(dataplane.ErrSubNotFound)
	}
	c.pushCtrlLocked(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Unsubscribe{Unsubscribe: &nodev1.Interest{Id: it.id, Name: NameProto(name)}}})
	return true
}

// acked resolves the interest the far end answered.
func (c *conn) acked(a *nodev1.InterestAck) {
	c.mu.Lock()
	var done func(error)
	for _, it := range c.out {
		if it.id == a.GetId() && it.done != nil {
			done, it.done = it.done, nil
		}
	}
	c.mu.Unlock()
	if done == nil {
		return
	}
	if a.GetError() != "" {
		done(errors.New(a.GetError()))
		return
	}
	done(nil)
}

// streamState is one stream generation: its number and its custody books.
type streamState struct {
	gen uint64
	rx  *rxState
	tx  *txState
}

// attach starts a new stream generation: control frames queued for the old stream are
// replaced by the replay of every interest, so the far end learns the full state once.
func (c *conn) attach() *streamState {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.up = true
	if c.graceT != nil {
		c.graceT.Stop()
		c.graceT = nil
	}
	c.ctrl = c.ctrl[:0]
	for name, it := range c.out {
		c.pushCtrlLocked(subscribeFrame(it, name))
	}
	c.in = map[uint64]dataplane.Name{}
	return &streamState{gen: c.gen, rx: &rxState{wake: c.wakeWriter}, tx: &txState{}}
}

// detach ends stream generation gen, if it is still the current one.
func (c *conn) detach(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return false
	}
	c.up = false
	return true
}

// serve runs one stream until it breaks, a newer stream replaces it or the conn
// closes: a reader goroutine, and this one writing. It returns the error that ended
// the stream (io.EOF when the far end closed its side cleanly; nil when the conn
// closed, after onClose, when not nil, had the chance to end the stream politely —
// it gets the reader's result channel to wait on).
func (c *conn) serve(s stream, st *streamState, onClose func(reader <-chan error)) error {
	reader := make(chan error, 1)
	c.n.wg.Go(func() { reader <- c.read(s, st) })
	// Whatever this stream carried that the far end never acknowledged may have died
	// with it: counted, once the stream is over.
	defer func() {
		if n := st.tx.end(); n > 0 {
			c.drop(reasonUnacked, n)
		}
	}()
	if err := c.write(s, st, reader); err != nil {
		return err
	}
	if c.ctx.Err() != nil {
		if onClose != nil {
			onClose(reader)
		}
		return nil
	}
	return <-reader
}

// errSuperseded ends a writer whose stream a newer one replaced.
var errSuperseded = errors.New("stream replaced by a newer one")

// write sends control frames first, then batches of messages, until the conn closes
// (nil), the stream fails, a newer stream takes over, or the reader ends (nil; its
// error stays in reader).
func (c *conn) write(s stream, st *streamState, reader chan error) error {
	batch := make([]*msg, 0, maxBatchMessages)
	out := &batchOut{}
	defer c.inlineTo(s, st)()
	for {
		if err := c.sendCtrl(s, st); err != nil {
			return err
		}
		select {
		case <-c.ctx.Done():
			return nil
		case err := <-reader:
			reader <- err
			return nil
		case <-c.wake:
		case q := <-c.msgs:
			var held []*custody
			batch, held = c.fill(append(batch[:0], q.m), q.cu)
			c.gate.mu.Lock()
			err := c.sendBatch(s, st, out, batch, held)
			c.gate.queued.Add(-int64(len(batch)))
			c.gate.mu.Unlock()
			if err != nil {
				return err
			}
			clear(batch)
		}
	}
}

// sendBatch sends one batch, recorded as unacknowledged first.
func (c *conn) sendBatch(s stream, st *streamState, out *batchOut, batch []*msg, held []*custody) error {
	seq := st.tx.next(len(batch), held)
	// The codec encodes the batch within SendMsg: out and the messages' bytes are
	// free again when it returns.
	out.msgs, out.seq = batch, seq
	err := s.SendMsg(out)
	out.msgs = nil
	if err != nil {
		if st.tx.unsent(seq) {
			c.drop(reasonLinkBroken, len(batch))
			releaseAll(held)
		}
		return err
	}
	c.met().out.Add(float64(len(batch)))
	return nil
}

// fill adds queued messages to batch up to the batching bounds, without waiting; held
// collects the custodies of the copies that came from another stream.
func (c *conn) fill(batch []*msg, cu *custody) ([]*msg, []*custody) {
	var held []*custody
	if cu != nil {
		held = append(held, cu)
	}
	size := len(batch[0].Raw)
	for len(batch) < maxBatchMessages && size < maxBatchBytes {
		select {
		case q := <-c.msgs:
			batch = append(batch, q.m)
			size += len(q.m.Raw)
			if q.cu != nil {
				held = append(held, q.cu)
			}
		default:
			return batch, held
		}
	}
	return batch, held
}

func (c *conn) sendCtrl(s stream, st *streamState) error {
	if seq, ok := st.rx.due(); ok {
		if err := s.SendMsg(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_BatchAck{BatchAck: &nodev1.BatchAck{Seq: seq}}}); err != nil {
			return err
		}
	}
	for {
		c.mu.Lock()
		if c.gen != st.gen {
			c.mu.Unlock()
			return errSuperseded
		}
		if len(c.ctrl) == 0 {
			c.mu.Unlock()
			return nil
		}
		f := c.ctrl[0]
		c.ctrl = c.ctrl[1:]
		c.mu.Unlock()
		if err := s.SendMsg(f); err != nil {
			return err
		}
	}
}

// read handles frames from the far end until the stream ends.
func (c *conn) read(s stream, st *streamState) error {
	var f frameIn
	for {
		if err := s.RecvMsg(&f); err != nil {
			return err
		}
		if f.isBatch {
			c.met().in.Add(float64(len(f.msgs)))
			cu := st.rx.received(f.seq, f.buf)
			single := alone(len(f.msgs), s)
			for i := range f.msgs {
				r := &f.msgs[i]
				// A reply goes back the way its request came, which may enter
				// the responder's group by a link: its origin (the responder) is
				// not checked. Only a node that passed the request on knows its
				// token, and follows it.
				if r.m.InReplyTo == "" && !c.originAllowed(r.origin) {
					c.refuseOrigin(r.origin)
					continue
				}
				c.n.receive(qmsg{&r.m, cu, single}, r.name, r.bad, c)
			}
			cu.release()
			continue
		}
		switch fr := f.ctrl.GetFrame().(type) {
		case *nodev1.LinkFrame_BatchAck:
			st.tx.acked(fr.BatchAck.GetSeq())
		case *nodev1.LinkFrame_Subscribe:
			c.remoteSubscribe(fr.Subscribe)
		case *nodev1.LinkFrame_Unsubscribe:
			c.remoteUnsubscribe(fr.Unsubscribe)
		case *nodev1.LinkFrame_Ack:
			c.acked(fr.Ack)
		case *nodev1.LinkFrame_Relink:
			c.n.relinked(c, fr.Relink.GetLinkId())
		}
	}
}

// originAllowed reports whether a message from the far end may carry origin, the
// node it was published at. A message published in this group reaches every node of
// the group that takes it straight from its origin (one hop, over their peering), so
// an origin in this group is allowed only over the peering of that very node: from
// anyone else it is forged, or a copy that came back round a cycle of links. The
// origins of other groups' messages cannot be checked here, nor can a message without
// one claim anybody.
func (c *conn) originAllowed(origin []byte) bool {
	group, _, ok := bytes.Cut(origin, []byte("/"))
	if !ok || string(group) != c.n.cfg.Group {
		return true
	}
	// A peering's remote is fixed when the conn is made: no lock.
	return c.kind.isPeer() && string(origin) == c.remote
}

// refuseOrigin drops a message whose origin the far end may not send, counted; the
// first of a conn is logged.
func (c *conn) refuseOrigin(origin []byte) {
	c.drop(reasonOrigin, 1)
	if c.originWarned.CompareAndSwap(false, true) {
		c.n.cfg.Logger.Warn("dropping messages whose origin the sender may not give", "node", c.n.id, "link", c.label(), "origin", string(origin))
	}
}

// remoteID is the far end's effective node id.
func (c *conn) remoteID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remote
}

// remoteSubscribe records the far end's interest and acks it. Over a peering it is an
// offer the forwarding table uses; over a link, the far end's route, recorded for
// listing.
func (c *conn) remoteSubscribe(in *nodev1.Interest) {
	name, err := nameFromProto(in.GetName())
	ack := &nodev1.InterestAck{Id: in.GetId()}
	if err != nil {
		ack.Error = err.Error()
	} else {
		c.mu.Lock()
		for id, old := range c.in {
			if old == name {
				delete(c.in, id)
			}
		}
		c.in[in.GetId()] = name
		c.mu.Unlock()
		if c.kind == peerIn {
			c.n.tab.setPeer(name, c, in.GetLocal())
		}
	}
	c.mu.Lock()
	c.pushCtrlLocked(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Ack{Ack: ack}})
	c.mu.Unlock()
}

func (c *conn) remoteUnsubscribe(in *nodev1.Interest) {
	c.mu.Lock()
	name, ok := c.in[in.GetId()]
	delete(c.in, in.GetId())
	c.mu.Unlock()
	if ok && c.kind == peerIn {
		c.n.tab.dropPeer(name, c)
	}
}

// close ends the conn for good: its streams stop, queued messages are counted as
// dropped and pending acks fail.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.up = true, false
	if c.graceT != nil {
		c.graceT.Stop()
	}
	var pending []func(error)
	for _, it := range c.out {
		if it.done != nil {
			pending = append(pending, it.done)
			it.done = nil
		}
	}
	c.mu.Unlock()
	c.cancel()
	for _, done := range pending {
		done(dataplane.ErrConnNotFound)
	}
	c.qmu.Lock()
	c.qclosed = true
	c.qmu.Unlock()
	for k := 0; ; k++ {
		select {
		case q := <-c.msgs:
			c.gate.queued.Add(-1)
			q.cu.release()
		default:
			if k > 0 {
				c.drop(reasonLinkClosed, k)
			}
			return
		}
	}
}
