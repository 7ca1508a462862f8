package jetstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An Apply publishes its messages itself and routes their acks back through one
// wildcard subscription per driver, rather than through nats.go's async publisher.
// That publisher decodes every ack with encoding/json and keeps a future, a map entry
// and a reply token per message: a CPU profile of a 10,000-entry Apply put its ack
// handling at 8 % of the process's CPU (7 % in json.Unmarshal), on a machine where
// the client and the server share two cores. An ack is a short, fixed-shape object
// ({"stream":"S","seq":N}, plus "domain" or "duplicate" at times), so its sequence
// is read without a decoder; anything else (an error, an unexpected shape) goes
// through encoding/json. Side by side, publishing the same 10,000 messages went from
// 58–69k to 71–86k messages/s (docs/benchmarks/jetstream.md).

// Retries of a publish that found no stream listening (a leader election), as
// nats.go's async publisher does by default.
const (
	noResponderRetries   = 2
	noResponderRetryWait = 250 * time.Millisecond
)

// ackRouter owns the subscription a registry's acks arrive on: replies go to
// <prefix>.<batch id>.<op index>.
type ackRouter struct {
	nc     *nats.Conn
	prefix string
	stream string // the registry's stream: an ack from any other is a failed write
	sub    *nats.Subscription

	mu      sync.Mutex
	batches map[uint64]*batch
	nextID  uint64
}

// acks returns the driver's ack router, subscribing on first use.
func (r *driver) acks() (*ackRouter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.router != nil {
		return r.router, nil
	}
	a := &ackRouter{nc: r.nc, prefix: r.nc.NewInbox(), stream: r.cfg.Name, batches: map[uint64]*batch{}}
	sub, err := r.nc.Subscribe(a.prefix+".>", a.handle)
	if err != nil {
		return nil, err
	}
	// Acks must never be dropped as a slow consumer's: a batch would wait for its
	// timeout. The publish window bounds how many can be outstanding.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	a.sub = sub
	r.router = a
	return a, nil
}

func (a *ackRouter) close() { _ = a.sub.Unsubscribe() }

// register gives b an id and the reply prefix of its ops.
func (a *ackRouter) register(b *batch) {
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	a.batches[id] = b
	a.mu.Unlock()
	b.router, b.id, b.reply = a, id, a.prefix+"."+strconv.FormatUint(id, 10)+"."
}

func (a *ackRouter) unregister(b *batch) {
	a.mu.Lock()
	delete(a.batches, b.id)
	a.mu.Unlock()
}

// handle runs on the subscription's goroutine for every ack.
func (a *ackRouter) handle(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, a.prefix+".")
	if !ok {
		return
	}
	idText, iText, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	id, err1 := strconv.ParseUint(idText, 10, 64)
	i, err2 := strconv.Atoi(iText)
	if err1 != nil || err2 != nil {
		return
	}
	a.mu.Lock()
	b := a.batches[id]
	a.mu.Unlock()
	if b == nil {
		return // the batch gave up on it
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		b.noResponders(i)
		return
	}
	seq, err := parseAck(m.Data, a.stream)
	b.resolve(i, seq, err)
}

var (
	ackSeq    = []byte(`"seq":`)
	ackError  = []byte(`"error"`)
	ackDomain = []byte(`"domain":"`)
)

// ErrWrongStream fails a write that another stream than the registry's stored: the
// registry's stream is gone and another one captures its subjects.
var ErrWrongStream = errors.New("written to another stream than the registry's")

// parseAck reads a publish ack for a message meant for stream: the stream sequence,
// or the server's error. Registrations do not carry Nats-Expected-Stream (the header
// costs the server about a tenth of its work per message, see
// docs/benchmarks/jetstream.md); the ack names the stream that stored the message,
// and one that is not ours fails the write with ErrWrongStream.
func parseAck(d []byte, stream string) (uint64, error) {
	if seq, ok := fastAckSeq(d, stream); ok {
		return seq, nil
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	switch err := json.Unmarshal(d, &resp); {
	case err != nil:
		return 0, jetstream.ErrInvalidJSAck
	case resp.Error != nil:
		return 0, resp.Error
	case resp.Stream == "":
		return 0, jetstream.ErrInvalidJSAck
	case resp.Stream != stream:
		return 0, fmt.Errorf("%w: stream %q took it, the registry's is %q", ErrWrongStream, resp.Stream, stream)
	}
	return resp.Seq, nil
}

// fastAckSeq reads the sequence of an ack written as nats-server writes one:
// {"stream":"<stream>",["domain":"<domain>",]"seq":<digits>, then the rest, which
// must not name "seq" or "error" again. Anything else (another field first, a key
// twice, a string that looks like a key) is left to the JSON decode, so that both
// read every ack the same way.
func fastAckSeq(d []byte, stream string) (uint64, bool) {
	rest, ok := ackFrom(d, stream)
	if !ok {
		return 0, false
	}
	if after, ok := bytes.CutPrefix(rest, ackDomain); ok {
		// Domain names hold no quote or backslash, so the first quote ends it.
		end := bytes.IndexByte(after, '"')
		if end < 0 || end+1 >= len(after) || after[end+1] != ',' {
			return 0, false
		}
		rest = after[end+2:]
	}
	digits, ok := bytes.CutPrefix(rest, ackSeq)
	if !ok {
		return 0, false
	}
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	if n == 0 || n >= len(digits) || (digits[n] != ',' && digits[n] != '}') {
		return 0, false
	}
	if tail := digits[n:]; bytes.Contains(tail, ackSeq) || bytes.Contains(tail, ackError) {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(digits[:n]), 10, 64)
	return seq, err == nil
}

// ackFrom reports whether d starts as an ack of stream does, {"stream":"<stream>",
// and returns what follows (stream names cannot hold a quote or a backslash, so no
// escaping to undo).
func ackFrom(d []byte, stream string) ([]byte, bool) {
	const head = `{"stream":"`
	if len(d) < len(head)+len(stream)+2 || string(d[:len(head)]) != head {
		return nil, false
	}
	rest := d[len(head):]
	if string(rest[:len(stream)]) != stream || rest[len(stream)] != '"' || rest[len(stream)+1] != ',' {
		return nil, false
	}
	return rest[len(stream)+2:], true
}
