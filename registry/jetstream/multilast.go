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
)

// A filtered lookup reads the last message of each matching subject with one batched
// direct get ("multi_last"), which the server answers from its per-subject index. A
// consumer with the same filter walks the stream's messages to find the matching ones:
// at 10,000 entries over 100 services it visits all 10,000 to deliver 100, which made
// it about twice as slow as this read (docs/benchmarks/jetstream.md).
//
// The server refuses (413) a multi_last request whose filters match more than
// multiLastMax subjects, and sends nothing else; such a lookup falls back to the
// consumer (or, with LookupDirect, to paging by sequence), which is the faster read
// for that many entries anyway.

// multiLastMax is the most subjects one multi_last request may match: nats-server's
// maxAllowedResponses in getDirectMulti, not configurable.
const multiLastMax = 1024

// multiLastPageTimeout bounds the wait for one multi_last answer.
const multiLastPageTimeout = 10 * time.Second

// errFallBack wraps every reason a multi_last read cannot serve a lookup that another
// read path can: the caller reads again by another path.
var errFallBack = errors.New("multi_last direct get unusable")

// errNoDirect: no server answers direct gets for the stream (503), which happens
// when direct get is turned off after the driver opened the stream.
var errNoDirect = errors.New("no server answers direct get")

// multiLastRequest is the body of a batched last-per-subject direct get.
type multiLastRequest struct {
	MultiLast []string `json:"multi_last"`
	Batch     int      `json:"batch"`
	// Seq skips the subjects whose last message is below it: where a page the
	// server cut short (max bytes) left off.
	Seq      uint64 `json:"seq,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// readMultiLast returns the last message of every subject matching filters, read
// with multi_last direct get, and the lowest of the answering servers' last stream
// sequences at the time of their read (each page is a point-in-time read of one
// server's store). The messages are buffered rather than visited so that a read that
// has to fall back leaves nothing half-collected. Errors wrapping errFallBack mean
// another read path may still serve the lookup; other errors (a dead connection, the
// context) end it.
func (r *driver) readMultiLast(ctx context.Context, filters []string) ([]rawMsg, uint64, error) {
	sub, err := r.subscribeReplies(multiLastMax)
	if err != nil {
		return nil, 0, err
	}
	defer sub.close()
	subject := jetstream.DefaultAPIPrefix + "DIRECT.GET." + r.cfg.Name
	req := multiLastRequest{MultiLast: filters, Batch: multiLastMax, MaxBytes: r.multiLastMaxBytes}
	var out []rawMsg
	var upTo uint64
	for {
		body, _ := json.Marshal(req)
		if err := r.nc.PublishRequest(subject, sub.inbox, body); err != nil {
			return nil, 0, err
		}
		page, err := readMultiLastPage(ctx, sub, out)
		if err != nil {
			return nil, 0, err
		}
		out = page.msgs
		if upTo == 0 || page.upTo < upTo {
			upTo = page.upTo
		}
		if !page.more {
			return out, upTo, nil
		}
		if !advances(req.Seq, page.next) {
			return nil, 0, fmt.Errorf("%w: a page cut short made no progress past sequence %d", errFallBack, req.Seq)
		}
		// The next page reads the stream as it is then, not as of the first page:
		// bounded by the first page's up_to_seq, a subject rewritten in between
		// would have neither its old message (gone) nor its new one (past the
		// bound). A subject rewritten between pages may thus be read twice; the
		// collector keeps the later message.
		req.Seq = page.next
	}
}

type multiLastPage struct {
	msgs []rawMsg
	more bool   // the server stopped early (max bytes): more messages from next on
	next uint64 // the sequence to continue from
	upTo uint64 // the answering server's last sequence when it read
}

// readMultiLastPage reads one answer, appending its messages to msgs, until the
// end-of-batch status.
func readMultiLastPage(ctx context.Context, sub *replies, msgs []rawMsg) (multiLastPage, error) {
	ctx, cancel := context.WithTimeout(ctx, multiLastPageTimeout)
	defer cancel()
	for {
		msg, err := sub.next(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders): // nats.go's reading of a 503 status
			return multiLastPage{}, fmt.Errorf("%w: %w", errFallBack, errNoDirect)
		case err != nil:
			return multiLastPage{}, fmt.Errorf("multi_last direct get: %w", err)
		}
		status := msg.Header.Get("Status")
		switch {
		case status == "":
			seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return multiLastPage{}, fmt.Errorf("%w: message without a sequence", errFallBack)
			}
			msgs = append(msgs, rawMsg{subject: msg.Header.Get(jetstream.SubjectHeader), seq: seq, h: msg.Header, data: msg.Data})
		case status == "204": // end of batch
			end, err := parseBatchEnd(msg.Header, true)
			if err != nil {
				// A server that does not know multi_last answers another request.
				return multiLastPage{}, fmt.Errorf("%w: %w", errFallBack, err)
			}
			return multiLastPage{msgs: msgs, more: end.pending > 0, next: end.last + 1, upTo: end.upTo}, nil
		case status == "404" && msg.Header.Get("Description") == "No Results":
			// Nothing matches. The server did not say how far its store reached:
			// the caller's consistency check must not take this for "caught up".
			return multiLastPage{msgs: msgs, upTo: 0}, nil
		default:
			// 413: more than multiLastMax subjects match. 408: a server without
			// multi_last. Anything else: the server could not load a message.
			return multiLastPage{}, fmt.Errorf("%w: status %s %s", errFallBack, status, msg.Header.Get("Description"))
		}
	}
}

// batchEnd is what the end-of-batch status of a batched direct get says: how many
// matching messages remain after this batch, the last sequence it sent, and (for
// multi_last, withUpTo) the answering server's last sequence when it read.
type batchEnd struct{ pending, last, upTo uint64 }

// parseBatchEnd reads h, the headers of an end-of-batch status; a count missing or
// not a number is an error naming it, so that a reader never pages on from a guess.
func parseBatchEnd(h nats.Header, withUpTo bool) (batchEnd, error) {
	names := []string{"Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"}
	if !withUpTo {
		names = names[:2]
	}
	var counts [3]uint64
	for i, name := range names {
		n, err := strconv.ParseUint(h.Get(name), 10, 64)
		if err != nil {
			return batchEnd{}, fmt.Errorf("end of batch without its %s count (%q)", name, h.Get(name))
		}
		counts[i] = n
	}
	return batchEnd{pending: counts[0], last: counts[1], upTo: counts[2]}, nil
}

// advances reports whether a batch asked for from sequence seq (0: the first) and
// ending with next as the next one to ask for moved past where it began: a reader
// that pages on from one that did not would ask for the same batch for ever.
func advances(seq, next uint64) bool { return next > max(seq, 1) }

// streamState is what a filtered lookup needs from the stream leader.
type streamState struct {
	lastSeq  uint64
	replicas int
}

// leaderState asks the stream leader (the stream info API, which only the leader
// answers) for the stream's last sequence and replica count.
func (r *driver) leaderState(ctx context.Context) (streamState, error) {
	ctx, cancel := context.WithTimeout(ctx, multiLastPageTimeout)
	defer cancel()
	reply, err := r.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.INFO."+r.cfg.Name, nil)
	if err != nil {
		return streamState{}, err
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error"`
		Config *struct {
			Replicas int `json:"num_replicas"`
		} `json:"config"`
		State *struct {
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return streamState{}, fmt.Errorf("stream info response: %w", err)
	}
	switch {
	case resp.Error != nil:
		return streamState{}, resp.Error
	case resp.State == nil || resp.Config == nil:
		return streamState{}, jetstream.ErrInvalidJetStreamResponse
	}
	return streamState{lastSeq: resp.State.LastSeq, replicas: resp.Config.Replicas}, nil
}
