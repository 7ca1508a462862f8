package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// listPage is how many messages one direct-get batch by sequence asks for. Paging by
// sequence is not capped by the server's 1,024-subject multi_last limit: it reads
// the stream in sequence order, which with one message per subject yields exactly the
// last message of every subject.
const listPage = 8192

// visitFunc receives each message a read delivers, with its stream sequence.
type visitFunc func(subject string, seq uint64, h nats.Header, data []byte)

// List returns the live entries matching f, sorted as endpoint.Sort does. Removals
// and delete markers are dropped; undecodable messages are counted, logged and
// skipped.
//
// It reads by whichever path is fastest for the filter (measured in
// docs/benchmarks/jetstream.md): a filtered lookup with one multi_last direct get
// where the stream allows direct get, everything else — a full lookup, more matching
// subjects than one multi_last may return, a stream without direct get — through a
// consumer, or with LookupDirect by paging with direct get.
func (r *driver) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	before := r.nc.LastError()
	out, err := r.list(ctx, f, r.pathFor(f))
	if err != nil {
		return nil, unavailable(deniedSince(r.nc, before, fmt.Errorf("list %s: %w", r.cfg.Name, err)))
	}
	return out, nil
}

// readPath is how a List reads the stream.
type readPath uint8

const (
	pathConsumer  readPath = iota + 1 // a consumer delivering the last message per subject
	pathMultiLast                     // one multi_last direct get (paged past max bytes)
	pathDirectSeq                     // batched direct get by sequence, next_by_subj
)

func (p readPath) String() string {
	switch p {
	case pathConsumer:
		return "consumer"
	case pathMultiLast:
		return "multi_last"
	case pathDirectSeq:
		return "direct"
	}
	return "unknown"
}

// pathFor picks the read for a filter. A full lookup matches every subject, so it
// never fits in one multi_last (multiLastMax) in a registry worth the name, and the
// consumer is the faster read for it.
func (r *driver) pathFor(f endpoint.Filter) readPath {
	if r.forcePath != 0 {
		return r.forcePath
	}
	// A filter on an IPv6 address alone reads every subject too (Subjects.Filters).
	filtered := !r.subj.readsAll(f)
	switch {
	case filtered && r.allowDirect.Load():
		return pathMultiLast
	case r.lookup == LookupDirect:
		return pathDirectSeq
	}
	return pathConsumer
}

// fallback is the read that serves a lookup multi_last could not.
func (r *driver) fallback() readPath {
	if r.lookup == LookupDirect {
		return pathDirectSeq
	}
	return pathConsumer
}

func (r *driver) list(ctx context.Context, f endpoint.Filter, path readPath) ([]endpoint.Endpoint, error) {
	filters, keep := r.subj.Filters(f), r.subj.AddressCheck(f)
	switch path {
	case pathMultiLast:
		msgs, err := r.readConsistent(ctx, filters)
		if errors.Is(err, errNoDirect) && r.allowDirect.CompareAndSwap(true, false) {
			r.log.Info("stream no longer answers direct get: filtered lookups read through a consumer until reopened")
		}
		if errors.Is(err, errFallBack) {
			r.fallbacks.Add(1)
			r.log.Debug("filtered lookup falls back", "to", r.fallback(), "reason", err)
			return r.list(ctx, f, r.fallback())
		}
		if err != nil {
			return nil, err
		}
		c := newCollector(r, keep)
		for _, m := range msgs {
			c.add(m.subject, m.seq, m.h, m.data)
		}
		return c.finish(), nil
	case pathDirectSeq:
		c := newCollector(r, keep)
		err := r.readDirect(ctx, r.subj.Filter(f), c.add)
		return c.finish(), err
	default:
		c := newCollector(r, keep)
		err := r.readConsumer(ctx, r.subj.consumerFilters(f), c)
		return c.finish(), err
	}
}

// readConsumer delivers the last message of every subject matching filters through
// a feed, stopping once nothing is pending.
func (r *driver) readConsumer(ctx context.Context, filters []string, c *collector) error {
	return r.readFeed(ctx, filters, false, c.add, c.expect)
}

// readFeed is readConsumer, optionally without payloads, telling expect (if not nil)
// how many messages the consumer counted before the first is visited.
func (r *driver) readFeed(ctx context.Context, filters []string, headersOnly bool, visit visitFunc, expect func(n uint64)) error {
	f, err := r.openFeed(ctx, filters, headersOnly)
	if err != nil {
		return err
	}
	defer f.stop(ctx)
	if expect != nil {
		expect(f.pending)
	}
	if f.pending == 0 {
		return nil
	}
	done := make(chan struct{})
	finish := func() error { // under f.mu
		if !f.stopped {
			close(done)
			f.stopped = true // nothing after the snapshot is ours
		}
		return nil
	}
	err = f.start(func(subject string, seq uint64, _ int64, h nats.Header, data []byte, pending uint64) error {
		visit(subject, seq, h, data)
		if pending == 0 {
			return finish()
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The last messages of the snapshot may be deleted before they are delivered,
	// and then no message says nothing is pending: ask the consumer from time to time.
	drained := time.NewTicker(drainCheck)
	defer drained.Stop()
	for {
		select {
		case <-done:
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-drained.C:
			if _, err := f.ifDrained(ctx, finish); err != nil {
				return err
			}
		}
	}
}

// subjectsHeld reads which subjects matching filters hold a message (live or not),
// without payloads, and the stream's last sequence before the read began: every
// message up to it that is missing from the subjects was gone when the read began.
func (r *driver) subjectsHeld(ctx context.Context, filters []string) (uint64, map[string]struct{}, error) {
	s, err := r.js.Stream(ctx, r.cfg.Name)
	if err != nil {
		return 0, nil, err
	}
	last := s.CachedInfo().State.LastSeq
	present := map[string]struct{}{}
	err = r.readFeed(ctx, filters, true, func(subject string, _ uint64, _ nats.Header, _ []byte) {
		present[subject] = struct{}{}
	}, nil)
	return last, present, err
}

// directGetRequest is the JSON body of a batched direct get.
type directGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj"`
	Batch   int    `json:"batch"`
}

// readDirect pages through the messages matching filter with batched direct get by
// sequence. Each page ends with an EOB status saying how many messages remain and the
// last sequence sent.
func (r *driver) readDirect(ctx context.Context, filter string, visit visitFunc) error {
	sub, err := r.subscribeReplies(listPage)
	if err != nil {
		return err
	}
	defer sub.close()
	subject := jetstream.DefaultAPIPrefix + "DIRECT.GET." + r.cfg.Name
	req := directGetRequest{NextFor: filter, Batch: listPage}
	for {
		body, _ := json.Marshal(req)
		if err := r.nc.PublishRequest(subject, sub.inbox, body); err != nil {
			return err
		}
		more, next, err := readDirectPage(ctx, sub, visit)
		if err != nil || !more {
			return err
		}
		if !advances(req.Seq, next) {
			return fmt.Errorf("direct get: end of batch says the next page starts at sequence %d, not past this one's start (%d)", next, max(req.Seq, 1))
		}
		req.Seq = next
	}
}

// readDirectPage reads one batch; more reports whether messages remain after next-1.
func readDirectPage(ctx context.Context, sub *replies, visit visitFunc) (more bool, next uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msg, err := sub.next(ctx)
		if err != nil {
			return false, 0, fmt.Errorf("direct get: %w", err)
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
			seq, _ := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
			visit(msg.Header.Get(jetstream.SubjectHeader), seq, msg.Header, msg.Data)
		case "404": // nothing at or after the requested sequence
			return false, 0, nil
		case "204": // end of batch
			end, err := parseBatchEnd(msg.Header, false)
			if err != nil {
				return false, 0, fmt.Errorf("direct get: %w", err)
			}
			return end.pending > 0, end.last + 1, nil
		default:
			return false, 0, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get("Description"))
		}
	}
}

// readConsistent is readMultiLast that, unless the lookup is LookupDirect (which
// accepts any replica's view), returns only a view at least as recent as the stream
// leader's when the lookup began, so a lookup sees every write acknowledged before it
// began. Any server in a replicated stream's direct-get group may answer a direct get,
// and a follower applies a write a moment after the leader acknowledged it: measured
// on a three-server cluster, 5–10 % of lookups made right after a write were answered
// by a follower that had not applied it yet.
//
// On a replicated stream the leader's last sequence is therefore asked for beside
// the read (the stream info, which only the leader answers; it also says how many
// replicas the stream has now), and an answer from a server that had not read that
// far is asked again (followers catch up within milliseconds), then given up on for
// the consumer. An R1 stream has one server, so its answer is the leader's and the
// probe is skipped: it would cost the lookup a third of its time. There only a
// mirror with mirror_direct could answer instead, and mirrors join the direct-get
// group only once caught up; as a cheap guard the answer must still cover the
// writes this driver had acknowledged. The replica count is re-read at least every
// replicasRecheck, so a stream scaled up under an open driver is probed soon after.
func (r *driver) readConsistent(ctx context.Context, filters []string) ([]rawMsg, error) {
	if r.lookup == LookupDirect {
		msgs, _, err := r.readMultiLast(ctx, filters)
		return msgs, err
	}
	r.mu.Lock()
	single := r.replicas == 1 && time.Since(r.replicasAt) < replicasRecheck
	r.mu.Unlock()
	if single {
		floor := r.written.Load()
		msgs, upTo, err := r.readMultiLast(ctx, filters)
		switch {
		case err != nil:
			return nil, err
		case upTo == 0 || upTo >= floor: // nothing matched: a 404 says no sequence
			return msgs, nil
		}
		// Not the stream's own server: a mirror behind our own writes.
		return nil, fmt.Errorf("%w: the answering server had read to sequence %d, this registry had written %d", errFallBack, upTo, floor)
	}
	type probe struct {
		info streamState
		err  error
	}
	leader := make(chan probe, 1)
	go func() {
		info, err := r.leaderState(ctx)
		leader <- probe{info, err}
	}()
	msgs, upTo, err := r.readMultiLast(ctx, filters)
	p := <-leader
	switch {
	case err != nil:
		return nil, err
	case p.err != nil:
		return nil, fmt.Errorf("%w: stream leader's last sequence: %w", errFallBack, p.err)
	}
	r.mu.Lock()
	r.replicas, r.replicasAt = p.info.replicas, time.Now()
	r.mu.Unlock()
	for _, pause := range staleRetries {
		if upTo >= p.info.lastSeq {
			return msgs, nil
		}
		if upTo == 0 {
			break // nothing matched, so the answer does not say how far it had read
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if msgs, upTo, err = r.readMultiLast(ctx, filters); err != nil {
			return nil, err
		}
	}
	if upTo >= p.info.lastSeq {
		return msgs, nil
	}
	return nil, fmt.Errorf("%w: the answering server had read to sequence %d, the leader to %d", errFallBack, upTo, p.info.lastSeq)
}

// replicasRecheck is how long a filtered lookup trusts the replica count it last read.
const replicasRecheck = 30 * time.Second

// staleRetries are the pauses before asking again when a follower that had not
// caught up with the leader answered.
var staleRetries = []time.Duration{0, time.Millisecond}
