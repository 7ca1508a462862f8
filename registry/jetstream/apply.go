package jetstream

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

const (
	// publishWindow bounds one Apply's publishes awaiting an ack, so a huge batch
	// cannot exhaust the connection's async-publish budget that concurrent Applies
	// share (maxPendingAcks).
	publishWindow  = 2048
	maxPendingAcks = 8192
	// ackTimeout fails an ack that never comes: a stream without a leader can take
	// a publish and never answer. One timer per batch rather than nats.go's one per
	// message, which costs more than the rest of the client's work.
	ackTimeout = 10 * time.Second
)

// Apply validates the batch, nets it out, publishes every op asynchronously and waits
// for all acks. Ops whose ack failed are reported in a *registry.ApplyError; the others
// are written. A batch is not atomic: JetStream has no multi-subject transaction here.
func (r *Registry) Apply(ctx context.Context, ops []registry.Op) error {
	if err := registry.Validate(ops); err != nil {
		return err
	}
	if err := r.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ops = registry.Coalesce(ops)
	plans := r.planRemovals(ctx, ops)
	b := &batch{ctx: ctx, futures: make([]jetstream.PubAckFuture, len(ops)), timer: time.NewTimer(ackTimeout)}
	defer b.timer.Stop()
	h := headers{r: r}
	r.removeOtherForms(b, ops, &h)
	for i, op := range ops {
		b.awaitBefore(i - publishWindow)
		switch {
		case b.errs[i] != nil: // removeOtherForms failed it
		case b.ctx.Err() != nil:
			b.fail(i, b.ctx.Err())
		case plans[i] != nil && plans[i].err != nil:
			b.fail(i, plans[i].err)
		default:
			b.publish(r.js, i, r.message(op, &h, plans[i]))
		}
	}
	b.awaitBefore(len(ops))
	r.retryRemovals(b, ops, &h)
	return b.result(ops)
}

// removeOtherForms clears the other subjects an unregistered key may sit on
// (Subjects.Forms: an IPv6 address as earlier versions spelled it, a port 0 written
// as a null port), publishing a removal where a live entry is found: otherwise an
// unregister would report success while readers still see the entry. Few keys have
// other forms, so these go one at a time, before the batch: removed after the key's
// own subject, they would briefly show readers the older entry again.
func (r *Registry) removeOtherForms(b *batch, ops []registry.Op, h *headers) {
	for i, op := range ops {
		if op.Kind != registry.OpUnregister || b.errs[i] != nil {
			continue
		}
		for _, subject := range r.subj.Forms(op.Endpoint.Key())[1:] {
			if err := r.removeIfLive(b.ctx, subject, op, h); err != nil {
				b.fail(i, err)
				break
			}
		}
	}
}

// removeIfLive publishes op's removal on subject if the subject holds an entry, sized
// and guarded as every removal is (removal.go).
func (r *Registry) removeIfLive(ctx context.Context, subject string, op registry.Op, h *headers) error {
	var err error
	for range maxRemovalAttempts {
		p := r.planRemoval(ctx, subject)
		if p.err != nil || !p.live {
			return p.err
		}
		m := r.message(op, h, &p)
		m.Subject = subject
		pctx, cancel := context.WithTimeout(ctx, ackTimeout)
		_, err = r.js.PublishMsg(pctx, m)
		cancel()
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
func (r *Registry) retryRemovals(b *batch, ops []registry.Op, h *headers) {
	for _, i := range slices.Clone(b.failed) {
		if ops[i].Kind != registry.OpUnregister || !isWrongLastSeq(b.errs[i]) {
			continue
		}
		for attempt := 1; attempt < maxRemovalAttempts && isWrongLastSeq(b.errs[i]) && b.ctx.Err() == nil; attempt++ {
			p := r.planRemoval(b.ctx, r.subj.For(ops[i].Endpoint.Key()))
			if p.err != nil {
				b.errs[i] = p.err
				break
			}
			ctx, cancel := context.WithTimeout(b.ctx, ackTimeout)
			_, err := r.js.PublishMsg(ctx, r.message(ops[i], h, &p))
			cancel()
			if err == nil {
				b.succeed(i)
				break
			}
			b.errs[i] = err
		}
	}
}

// message builds the stream message for one op. Every message replaces its subject
// (rollup) and names the stream it must land in, so a subject captured by some other
// stream fails instead of being written there.
func (r *Registry) message(op registry.Op, h *headers, p *removalPlan) *nats.Msg {
	k := op.Endpoint.Key()
	m := &nats.Msg{Subject: r.subj.For(k)}
	if op.Kind == registry.OpUnregister {
		// A purge leaves watchers nothing to see, so a removal is a message: a
		// marker that watchers turn into Removed and that expires once what it
		// replaced could no longer come back (removal.go). The body names the whole
		// key, port included, for readers that never saw the entry; readers of this
		// package ignore it.
		m.Header = h.removal(p)
		m.Data = appendJSON(nil, endpoint.Endpoint{Cluster: k.Cluster, Service: k.Service, Protocol: k.Protocol, Address: k.Address, Port: k.Port})
		return m
	}
	m.Header = h.register(op.Endpoint.TTL)
	m.Data = appendJSON(make([]byte, 0, 256), op.Endpoint)
	return m
}

// headers hands out the header sets of one Apply. Registrations with the same headers
// share one map: nats.go only reads it, and a batch needs a handful of distinct sets.
// Each removal has its own: it names the subject sequence it replaces.
type headers struct {
	r     *Registry
	byTTL map[endpoint.TTL]nats.Header
}

func (h *headers) base() nats.Header {
	return nats.Header{
		jetstream.MsgRollup:            {jetstream.MsgRollupSubject},
		jetstream.ExpectedStreamHeader: {h.r.cfg.Name},
	}
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

func (h *headers) removal(p *removalPlan) nats.Header {
	hd := h.base()
	hd[jetstream.MarkerReasonHeader] = []string{markerReasonRemove}
	hd[OpHeader] = []string{OpUnregister}
	if ttl := p.life.header(); ttl != "" {
		hd[jetstream.MsgTTLHeader] = []string{ttl}
	}
	hd[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(p.lastSeq, 10)}
	return hd
}

// batch tracks the acks of one Apply.
type batch struct {
	ctx     context.Context
	futures []jetstream.PubAckFuture
	next    int // futures before next have been awaited
	timer   *time.Timer
	failed  []int
	errs    map[int]error // why each of failed failed
}

// publish sends op i's message. When concurrent Applies have filled the connection's
// budget of unacknowledged publishes, it waits for this batch's oldest ack and tries
// again rather than failing the op.
func (b *batch) publish(js jetstream.JetStream, i int, m *nats.Msg) {
	for {
		f, err := js.PublishMsgAsync(m)
		switch {
		case err == nil:
			b.futures[i] = f
			return
		case errors.Is(err, jetstream.ErrTooManyStalledMsgs) && b.next < i:
			b.awaitBefore(b.next + 1)
		default:
			b.fail(i, err)
			return
		}
	}
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
		f := b.futures[b.next]
		if f == nil {
			continue
		}
		b.futures[b.next] = nil
		select { // most acks are in by the time a batch waits for them
		case <-f.Ok():
			continue
		default:
		}
		b.timer.Reset(ackTimeout)
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.fail(b.next, err)
		case <-b.ctx.Done():
			b.fail(b.next, b.ctx.Err())
		case <-b.timer.C:
			b.fail(b.next, jetstream.ErrAsyncPublishTimeout)
		}
	}
}

func (b *batch) result(ops []registry.Op) error {
	if len(b.failed) == 0 {
		return nil
	}
	slices.Sort(b.failed)
	keys := make([]endpoint.Key, len(b.failed))
	for j, i := range b.failed {
		keys[j] = ops[i].Endpoint.Key()
	}
	return &registry.ApplyError{Failed: keys, Err: unavailable(b.errs[b.failed[0]])}
}
