package jetstream

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

const (
	// publishWindow bounds one Apply's publishes awaiting an ack, so that a huge
	// batch neither floods the server nor keeps unbounded messages for retries.
	publishWindow = 2048
	// maxPendingAcks is the budget of nats.go's async publisher, which the
	// driver's jetstream context keeps for any async publish outside Apply.
	maxPendingAcks = 8192
	// ackTimeout fails an ack that never comes: a stream without a leader can take
	// a publish and never answer. One timer per batch rather than nats.go's one per
	// message, which costs more than the rest of the client's work.
	ackTimeout = 10 * time.Second
)

// Apply publishes every op asynchronously and waits for all acks. Ops whose ack
// failed are reported in a *registry.ApplyError; the others are written. A batch is
// not atomic: JetStream has no multi-subject transaction here.
//
// Ops under a hold (hold.go): a registration names the hold in HoldHeader and has no
// Nats-TTL; an unregistration removes the entry only while its subject's last
// message names that hold, and leaves it otherwise, or if anything is written to the
// subject between the read and the removal.
func (r *driver) Apply(ctx context.Context, ops []registry.Op) error {
	if err := r.checkHolds(ops); err != nil {
		return err
	}
	before := r.nc.LastError()
	router, err := r.acks()
	if err != nil {
		return unavailable(deniedSince(r.nc, before, err))
	}
	plans := r.planRemovals(ctx, ops)
	b := newBatch(ctx, r.nc, len(ops))
	router.register(b)
	defer router.unregister(b)
	defer b.timer.Stop()
	h := headers{r: r}
	var mem slab
	late := r.removeOtherForms(b, ops, plans, &h)
	for i, op := range ops {
		b.awaitBefore(i - publishWindow)
		switch {
		case b.errs[i] != nil: // removeOtherForms failed it
		case b.ctx.Err() != nil:
			b.fail(i, b.ctx.Err())
		case plans[i] != nil && plans[i].err != nil:
			b.fail(i, plans[i].err)
		case plans[i] != nil && op.Hold != "" && !plans[i].heldBy(op.Hold):
			// Not this hold's entry (any more): taken over, removed, never written.
		default:
			b.publish(i, r.message(op, &h, plans[i], &mem))
		}
	}
	b.awaitBefore(len(ops))
	r.retryRemovals(b, ops, &h)
	r.removeLate(b, ops, late, &h)
	r.noteWritten(b.maxSeq)
	return b.result(ops, func(err error) error { return deniedSince(r.nc, before, err) })
}

// removeOtherForms clears the other subjects an unregistered key may sit on
// (Subjects.Forms: an IPv6 address as earlier versions spelled it, a port 0 written
// as a null port; and an IPv6 address another writer spelled otherwise, which a
// listing of the service's subjects finds: spelling.go), publishing a removal where a
// live entry is found: otherwise an unregister would report success while readers
// still see the entry. Readers show a key's newest entry, so its subjects are
// cleared oldest first: a form older than the key's own live subject goes now, one at
// a time, before the batch; a newer one (the other writer registered again after us)
// is returned, to go after the batch has removed the key's own (removeLate).
func (r *driver) removeOtherForms(b *batch, ops []registry.Op, plans []*removalPlan, h *headers) []lateRemoval {
	spelled := r.otherSpellings(b, ops)
	var late []lateRemoval
	for i, op := range ops {
		// A held entry is on its key's own subject, where this backend wrote it.
		if op.Kind != registry.OpUnregister || op.Hold != "" || b.errs[i] != nil {
			continue
		}
		for _, subject := range append(r.subj.Forms(op.Endpoint.Key())[1:], spelled[i]...) {
			p := r.planRemoval(b.ctx, subject)
			if p.err == nil && p.live && plans[i] != nil && plans[i].live && p.lastSeq > plans[i].lastSeq {
				late = append(late, lateRemoval{i: i, subject: subject, seq: p.lastSeq})
				continue
			}
			if err := r.removeIfLive(b.ctx, subject, op, h, p); err != nil {
				b.fail(i, err)
				break
			}
		}
	}
	slices.SortFunc(late, func(a, b lateRemoval) int { return cmp.Compare(a.seq, b.seq) })
	return late
}

// lateRemoval is another form of an unregistered key that holds a newer entry than
// the key's own subject: it is cleared after that one.
type lateRemoval struct {
	i       int // the op
	subject string
	seq     uint64
}

// removeLate clears the late forms, oldest first, of the ops the batch removed.
func (r *driver) removeLate(b *batch, ops []registry.Op, late []lateRemoval, h *headers) {
	for _, l := range late {
		if b.errs[l.i] != nil {
			continue
		}
		if err := r.removeIfLive(b.ctx, l.subject, ops[l.i], h, r.planRemoval(b.ctx, l.subject)); err != nil {
			b.fail(l.i, err)
		}
	}
}

// removeIfLive publishes op's removal on subject if the subject holds an entry, sized
// and guarded as every removal is (removal.go); p is the subject's first sizing.
func (r *driver) removeIfLive(ctx context.Context, subject string, op registry.Op, h *headers, p removalPlan) error {
	var err error
	for attempt := range maxRemovalAttempts {
		if attempt > 0 {
			p = r.planRemoval(ctx, subject)
		}
		if p.err != nil || !p.live {
			return p.err
		}
		m := r.message(op, h, &p, nil)
		m.Subject = subject
		pctx, cancel := context.WithTimeout(ctx, ackTimeout)
		var a *jetstream.PubAck
		a, err = r.js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			r.noteWritten(a.Sequence)
		}
		if !isWrongLastSeq(err) {
			return err
		}
	}
	return err
}

// maxRemovalAttempts bounds how often a removal is sized again because its subject
// kept changing under it.
const maxRemovalAttempts = 3

// retryRemovals sizes and publishes again, one at a time, the removals whose subject
// changed between the read that sized them and their publish.
func (r *driver) retryRemovals(b *batch, ops []registry.Op, h *headers) {
	for _, i := range slices.Clone(b.failed) {
		if ops[i].Kind != registry.OpUnregister || !isWrongLastSeq(b.errs[i]) {
			continue
		}
		if ops[i].Hold != "" {
			// Written meanwhile, by a takeover or the hold's own registration: the
			// removal was meant for what was read, so the entry stays.
			b.succeed(i)
			continue
		}
		for attempt := 1; attempt < maxRemovalAttempts && isWrongLastSeq(b.errs[i]) && b.ctx.Err() == nil; attempt++ {
			p := r.planRemoval(b.ctx, r.subj.For(ops[i].Endpoint.Key()))
			if p.err != nil {
				b.errs[i] = p.err
				break
			}
			ctx, cancel := context.WithTimeout(b.ctx, ackTimeout)
			a, err := r.js.PublishMsg(ctx, r.message(ops[i], h, &p, nil))
			cancel()
			if err == nil {
				b.acked(a)
				b.succeed(i)
				break
			}
			b.errs[i] = err
		}
	}
}

// message builds the stream message for one op, in mem if not nil. Every message
// replaces its subject (rollup). A removal also names the stream it must land in; a
// registration's ack is checked instead (parseAck), which costs the server nothing.
func (r *driver) message(op registry.Op, h *headers, p *removalPlan, mem *slab) *nats.Msg {
	k := op.Endpoint.Key()
	m := mem.msg()
	m.Subject = r.subj.For(k)
	if op.Kind == registry.OpUnregister {
		// A purge leaves watchers nothing to see, so a removal is a message: a
		// marker that watchers turn into Removed and that expires once what it
		// replaced could no longer come back (removal.go). The body names the whole
		// key, port included, for readers that never saw the entry; readers of this
		// package ignore it.
		m.Header = h.removal(p)
		m.Data = appendJSON(nil, k.Endpoint())
		return m
	}
	if op.Hold != "" {
		m.Header = h.held(op.Hold)
	} else {
		m.Header = h.register(op.Endpoint.TTL)
	}
	m.Data = mem.payload(op.Endpoint)
	return m
}

// slab hands out an Apply's messages and their payloads from a few large allocations
// rather than two small ones per message. Nothing handed out is reused: a message is
// kept until its ack, for a retry. A nil *slab allocates each on its own.
type slab struct {
	msgs []nats.Msg
	buf  []byte
}

const (
	slabMsgs  = 256
	slabBytes = 64 << 10
)

func (s *slab) msg() *nats.Msg {
	if s == nil {
		return &nats.Msg{}
	}
	if len(s.msgs) == 0 {
		s.msgs = make([]nats.Msg, slabMsgs)
	}
	m := &s.msgs[0]
	s.msgs = s.msgs[1:]
	return m
}

// payload returns e's JSON payload. One larger than what is left of the buffer moves
// the buffer (append): what was handed out before stays where it was.
func (s *slab) payload(e endpoint.Endpoint) []byte {
	if s == nil {
		return appendJSON(make([]byte, 0, 256), e)
	}
	if cap(s.buf)-len(s.buf) < 512 {
		s.buf = make([]byte, 0, slabBytes)
	}
	start := len(s.buf)
	s.buf = appendJSON(s.buf, e)
	return s.buf[start:len(s.buf):len(s.buf)]
}

// headers hands out the header sets of one Apply. Registrations with the same headers
// share one map: nats.go only reads it, and a batch needs a handful of distinct sets.
// Each removal has its own: it names the subject sequence it replaces.
type headers struct {
	r      *driver
	byTTL  map[endpoint.TTL]nats.Header
	byHold map[registry.HoldID]nats.Header
}

func (h *headers) base() nats.Header {
	return nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}
}

// register returns the headers of a registration. An unset TTL sends no Nats-TTL, so
// the stream's MaxAge applies; "never" outlives it.
func (h *headers) register(ttl endpoint.TTL) nats.Header {
	if hd, ok := h.byTTL[ttl]; ok {
		return hd
	}
	hd := h.base()
	if ttl.IsSet() {
		hd[jetstream.MsgTTLHeader] = []string{ttl.String()}
	}
	if h.byTTL == nil {
		h.byTTL = map[endpoint.TTL]nats.Header{}
	}
	h.byTTL[ttl] = hd
	return hd
}

// held returns the headers of a registration under hold id: the owner, and no
// Nats-TTL, so that the entry lives while its hold does (the reaper removes it after)
// or, for readers that know nothing of holds, until the stream's MaxAge. Its TTL
// stays in the payload, as registered.
func (h *headers) held(id registry.HoldID) nats.Header {
	if hd, ok := h.byHold[id]; ok {
		return hd
	}
	hd := h.base()
	hd[HoldHeader] = []string{string(id)}
	if h.byHold == nil {
		h.byHold = map[registry.HoldID]nats.Header{}
	}
	h.byHold[id] = hd
	return hd
}

func (h *headers) removal(p *removalPlan) nats.Header {
	hd := h.base()
	hd[jetstream.ExpectedStreamHeader] = []string{h.r.cfg.Name}
	hd[jetstream.MarkerReasonHeader] = []string{markerReasonRemove}
	hd[OpHeader] = []string{OpUnregister}
	if ttl := p.life.header(); ttl != "" {
		hd[jetstream.MsgTTLHeader] = []string{ttl}
	}
	hd[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(p.lastSeq, 10)}
	return hd
}

// batch tracks the acks of one Apply. The Apply's goroutine publishes and waits;
// the ack router's goroutine records acks in res.
type batch struct {
	ctx    context.Context
	nc     *nats.Conn
	timer  *time.Timer
	next   int // ops before next have been awaited
	failed []int
	errs   map[int]error // why each of failed failed
	maxSeq uint64        // the highest sequence acknowledged

	router *ackRouter
	id     uint64
	reply  string // the reply subject of op i is reply + i
	// replyBuf is where publish builds a reply subject.
	replyBuf []byte

	mu      sync.Mutex
	msgs    []*nats.Msg // what was sent, for a retry after no responders
	res     []ackResult
	waitFor int           // the op the Apply's goroutine waits for
	wake    chan struct{} // poked when waitFor's ack arrives
}

type ackState uint8

const (
	ackNone     ackState = iota // not published, or given up on
	ackInFlight                 // published, no ack yet
	ackDone                     // acked or refused: seq or err is set
)

type ackResult struct {
	state   ackState
	retries uint8
	seq     uint64
	err     error
}

func newBatch(ctx context.Context, nc *nats.Conn, n int) *batch {
	return &batch{ctx: ctx, nc: nc, timer: time.NewTimer(ackTimeout), msgs: make([]*nats.Msg, n),
		res: make([]ackResult, n), waitFor: -1, wake: make(chan struct{}, 1)}
}

func (b *batch) acked(a *jetstream.PubAck) {
	if a != nil {
		b.ackedSeq(a.Sequence)
	}
}

func (b *batch) ackedSeq(seq uint64) {
	if seq > b.maxSeq {
		b.maxSeq = seq
	}
}

// publish sends op i's message with its own reply subject.
func (b *batch) publish(i int, m *nats.Msg) {
	b.replyBuf = strconv.AppendInt(append(b.replyBuf[:0], b.reply...), int64(i), 10)
	m.Reply = string(b.replyBuf) // one allocation where Itoa and + made two
	b.mu.Lock()
	b.msgs[i] = m
	b.res[i].state = ackInFlight // before the send: the ack can beat PublishMsg's return
	b.mu.Unlock()
	if err := b.nc.PublishMsg(m); err != nil {
		b.mu.Lock()
		b.res[i].state = ackNone
		b.mu.Unlock()
		b.fail(i, err)
	}
}

// resolve records op i's ack; from the router's goroutine.
func (b *batch) resolve(i int, seq uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.res) || b.res[i].state != ackInFlight {
		return
	}
	b.res[i].state, b.res[i].seq, b.res[i].err = ackDone, seq, err
	b.msgs[i] = nil
	if b.waitFor == i {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// noResponders handles op i's publish finding no stream (a leader election): it is
// sent again a little later, twice, then fails as unavailable.
func (b *batch) noResponders(i int) {
	b.mu.Lock()
	if i < 0 || i >= len(b.res) || b.res[i].state != ackInFlight {
		b.mu.Unlock()
		return
	}
	if b.res[i].retries >= noResponderRetries {
		b.mu.Unlock()
		b.resolve(i, 0, jetstream.ErrNoStreamResponse)
		return
	}
	b.res[i].retries++
	m := b.msgs[i]
	b.mu.Unlock()
	time.AfterFunc(noResponderRetryWait, func() {
		b.mu.Lock()
		live := b.res[i].state == ackInFlight
		b.mu.Unlock()
		if !live {
			return // the batch gave up on it meanwhile
		}
		if err := b.nc.PublishMsg(m); err != nil {
			b.resolve(i, 0, err)
		}
	})
}

func (b *batch) fail(i int, err error) {
	b.failed = append(b.failed, i)
	if b.errs == nil {
		b.errs = map[int]error{}
	}
	b.errs[i] = err
}

// succeed takes back the failure of op i, which a retry wrote after all.
func (b *batch) succeed(i int) {
	b.failed = slices.DeleteFunc(b.failed, func(j int) bool { return j == i })
	delete(b.errs, i)
}

// awaitBefore waits for the acks of every op before end; a cancelled context fails
// those still outstanding as unconfirmed.
func (b *batch) awaitBefore(end int) {
	for ; b.next < end; b.next++ {
		b.mu.Lock()
		if b.res[b.next].state == ackInFlight { // most acks are in by the time a batch waits for them
			b.timer.Reset(ackTimeout)
			for b.res[b.next].state == ackInFlight {
				b.waitFor = b.next
				b.mu.Unlock()
				var err error
				select {
				case <-b.wake: // maybe left over from an op given up on: look again
				case <-b.ctx.Done():
					err = b.ctx.Err()
				case <-b.timer.C:
					err = jetstream.ErrAsyncPublishTimeout
				}
				b.mu.Lock()
				if err != nil && b.res[b.next].state == ackInFlight {
					b.res[b.next] = ackResult{state: ackDone, err: err}
					b.msgs[b.next] = nil
				}
			}
			b.waitFor = -1
		}
		res := b.res[b.next]
		if res.state == ackDone {
			b.res[b.next].state = ackNone // a late duplicate is ignored
		}
		b.mu.Unlock()
		switch {
		case res.state != ackDone:
		case res.err != nil:
			b.fail(b.next, res.err)
		default:
			b.ackedSeq(res.seq)
		}
	}
}

// result is the batch's outcome: nil, or the keys that failed with the first
// failure's error, explained by explain.
func (b *batch) result(ops []registry.Op, explain func(error) error) error {
	if len(b.failed) == 0 {
		return nil
	}
	slices.Sort(b.failed)
	keys := make([]endpoint.Key, len(b.failed))
	for j, i := range b.failed {
		keys[j] = ops[i].Endpoint.Key()
	}
	return &registry.ApplyError{Failed: keys, Err: unavailable(explain(b.errs[b.failed[0]]))}
}
