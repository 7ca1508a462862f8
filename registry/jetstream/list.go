package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// listPage is how many messages one direct-get batch asks for. Neither lookup
// strategy is capped by the server's 1,024-subject multi_last limit: both read
// the stream in sequence order, which with one message per subject yields exactly
// the last message of every subject.
const listPage = 8192

// visitFunc receives each message a read delivers, with its stream sequence.
type visitFunc func(subject string, seq uint64, h nats.Header, data []byte)

// List returns the live entries matching f, sorted as endpoint.Sort does. Removals
// and delete markers are dropped; undecodable messages are counted, logged and
// skipped.
func (r *Registry) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	var c *collector
	var err error
	if filters := r.subj.Filters(f); r.lookup == LookupDirect && len(filters) > 1 {
		// Direct get takes one subject: read the address's every spelling through
		// a wildcard and keep what matches.
		c = newCollector(r, f.Match)
		err = r.readDirect(ctx, r.subj.Filter(f), c.add)
	} else if r.lookup == LookupDirect {
		c = newCollector(r, nil)
		err = r.readDirect(ctx, filters[0], c.add)
	} else {
		c = newCollector(r, nil)
		err = r.readConsumer(ctx, filters, c.add)
	}
	out := c.finish()
	if err != nil {
		return nil, unavailable(fmt.Errorf("list %s: %w", r.cfg.Name, err))
	}
	return out, nil
}

// readConsumer delivers the last message of every subject matching filters through
// a feed, stopping once nothing is pending.
func (r *Registry) readConsumer(ctx context.Context, filters []string, visit visitFunc) error {
	return r.readFeed(ctx, filters, false, visit)
}

// readFeed is readConsumer, optionally without payloads.
func (r *Registry) readFeed(ctx context.Context, filters []string, headersOnly bool, visit visitFunc) error {
	f, err := r.openFeed(ctx, filters, headersOnly)
	if err != nil {
		return err
	}
	defer f.stop(ctx)
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
	err = f.start(func(subject string, seq uint64, h nats.Header, data []byte, pending uint64) error {
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
func (r *Registry) subjectsHeld(ctx context.Context, filters []string) (uint64, map[string]struct{}, error) {
	s, err := r.js.Stream(ctx, r.cfg.Name)
	if err != nil {
		return 0, nil, err
	}
	last := s.CachedInfo().State.LastSeq
	present := map[string]struct{}{}
	err = r.readFeed(ctx, filters, true, func(subject string, _ uint64, _ nats.Header, _ []byte) {
		present[subject] = struct{}{}
	})
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
func (r *Registry) readDirect(ctx context.Context, filter string, visit visitFunc) error {
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	subject := jetstream.DefaultAPIPrefix + "DIRECT.GET." + r.cfg.Name
	req := directGetRequest{NextFor: filter, Batch: listPage}
	for {
		body, _ := json.Marshal(req)
		if err := r.nc.PublishRequest(subject, inbox, body); err != nil {
			return err
		}
		more, next, err := readDirectPage(ctx, sub, visit)
		if err != nil || !more {
			return err
		}
		req.Seq = next
	}
}

// readDirectPage reads one batch; more reports whether messages remain after next-1.
func readDirectPage(ctx context.Context, sub *nats.Subscription, visit visitFunc) (more bool, next uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(ctx)
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
			pending, _ := strconv.ParseUint(msg.Header.Get("Nats-Num-Pending"), 10, 64)
			last, _ := strconv.ParseUint(msg.Header.Get("Nats-Last-Sequence"), 10, 64)
			return pending > 0, last + 1, nil
		default:
			return false, 0, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get("Description"))
		}
	}
}
