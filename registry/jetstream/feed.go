package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// feedHeartbeat is the consumer's idle heartbeat; two missed ones fail the feed,
// which is how a reader notices that its consumer vanished with a server.
const feedHeartbeat = 5 * time.Second

// drainCheckTimeout bounds one consumer info request of feed.ifDrained.
const drainCheckTimeout = 5 * time.Second

// consumerCreateTimeout bounds a consumer's creation whatever the caller's deadline
// (nats.go's own default, which applies only to a context without one). A request
// lost with the server it reached, as when a stream's leader stops, is answered by
// nobody: a watch re-opening its feed after a failover passes the context of its
// whole life, and waited on such a request until that ended instead of retrying.
const consumerCreateTimeout = 5 * time.Second

var errGap = errors.New("consumer skipped a delivery")

// feed reads a filter's last message per subject, then every later message, through
// an ephemeral push consumer with flow control — the shape of an ordered consumer.
//
// Push rather than pull: in a cluster, a pull request sent before the new consumer's
// request subscription has crossed the routes finds no responder, and the pull
// stalls until heartbeats time out; a push consumer simply starts delivering once
// our subscription's interest reaches it. Flow control makes a slow handler throttle the server instead of
// overflowing the subscription.
//
// The deliveries are read from a plain subscription, made before the consumer as
// nats.go's ordered consumer does, rather than through nats.go's push consumer: a
// full lookup through that was 1.3–1.5× a KV WatchAll of the same messages before
// decoding anything (docs/benchmarks/jetstream.md). Per message it stopped and
// re-armed a heartbeat timer, wrapped the message and allocated its metadata; and,
// subscribing only once the consumer existed, the server met the consumer without
// interest first.
type feed struct {
	r       *driver
	cons    jetstream.PushConsumer
	sub     *nats.Subscription
	pending uint64 // messages matching at creation: the snapshot's size

	ready     chan struct{} // closed by start or stop: deliveries wait for it
	readyOnce sync.Once
	stopOnce  sync.Once
	heard     atomic.Uint64 // bumped as each delivery begins and ends (watchHeartbeats)
	done      chan struct{} // closed by stop

	mu        sync.Mutex // held while the handler runs
	fn        feedHandler
	stopped   bool
	delivered uint64
	errc      chan error
}

// feedHandler receives each message, in stream order, with its stream sequence and
// the consumer's count of messages still pending after it.
type feedHandler func(subject string, seq uint64, tm int64, h nats.Header, data []byte, pending uint64) error

// openFeed creates the consumer for the subjects matching any of filters. A
// headers-only feed delivers no payloads. Deliveries wait for start.
func (r *driver) openFeed(ctx context.Context, filters []string, headersOnly bool) (*feed, error) {
	f := &feed{r: r, ready: make(chan struct{}), done: make(chan struct{}), errc: make(chan error, 1)}
	cfg := jetstream.ConsumerConfig{
		HeadersOnly:       headersOnly,
		DeliverSubject:    r.nc.NewInbox(),
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     feedHeartbeat,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: 30 * time.Second,
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0] // the form every server version takes
	} else {
		cfg.FilterSubjects = filters
	}
	var err error
	if f.sub, err = r.nc.Subscribe(cfg.DeliverSubject, f.receive); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, consumerCreateTimeout)
	cons, err := r.js.CreatePushConsumer(cctx, r.cfg.Name, cfg)
	cancel()
	if err != nil {
		// A request that timed out may still have created the consumer, whose
		// deliveries must not hold the subscription's goroutine waiting for start.
		f.release()
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	f.cons, f.pending = cons, cons.CachedInfo().NumPending
	go f.watchHeartbeats()
	return f, nil
}

// start delivers messages to fn on the subscription's goroutine until stop or the
// first failure, which Err then reports.
func (f *feed) start(fn feedHandler) error {
	f.mu.Lock()
	f.fn = fn
	f.mu.Unlock()
	f.readyOnce.Do(func() { close(f.ready) })
	return nil
}

// receive runs on the subscription's goroutine for every delivery and control message.
func (f *feed) receive(m *nats.Msg) {
	f.heard.Add(1)
	defer f.heard.Add(1)
	<-f.ready
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || f.fn == nil {
		return
	}
	if status := m.Header.Get("Status"); status != "" {
		f.control(m, status)
		return
	}
	cseq, sseq, pending, tm, ok := ackMeta(m.Reply)
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("%w: reply subject %q", jetstream.ErrNotJSMessage, m.Reply)
	case cseq != f.delivered+1:
		// No acks means the server counts a message lost in flight as
		// delivered: only the consumer sequence shows the hole.
		err = fmt.Errorf("%w: got consumer sequence %d after %d", errGap, cseq, f.delivered)
	default:
		f.delivered = cseq
		err = f.fn(m.Subject, sseq, tm, m.Header, m.Data, pending)
	}
	if err != nil {
		f.fail(err)
	}
}

// control answers the consumer's flow control and fails the feed on what means it
// can no longer promise every message: the consumer deleted, a leader change.
func (f *feed) control(m *nats.Msg, status string) {
	switch status {
	case "100":
		switch {
		case m.Reply != "": // a flow control request
			_ = f.r.nc.Publish(m.Reply, nil)
		case m.Header.Get("Nats-Consumer-Stalled") != "":
			// A heartbeat saying the consumer still waits for the answer to a
			// flow control request: answer again, it may have been lost.
			_ = f.r.nc.Publish(m.Header.Get("Nats-Consumer-Stalled"), nil)
		}
	case "409":
		switch d := m.Header.Get("Description"); {
		case strings.EqualFold(d, "Consumer Deleted"):
			f.fail(jetstream.ErrConsumerDeleted)
		case strings.EqualFold(d, "Leadership Change"):
			f.fail(jetstream.ErrConsumerLeadershipChanged)
		}
	}
}

// watchHeartbeats fails the feed after two checks in a row, a heartbeat apart, heard
// nothing — no delivery, no heartbeat, no handler running (an odd count) — as nats.go's
// consumers do after twice the heartbeat. While the connection is down nothing counts
// as missed: a watch session notices the reconnect itself.
func (f *feed) watchHeartbeats() {
	t := time.NewTicker(feedHeartbeat)
	defer t.Stop()
	var last uint64
	missed := 0
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
		}
		now := f.heard.Load()
		if now != last || now%2 == 1 || !f.r.nc.IsConnected() {
			last, missed = now, 0
			continue
		}
		if missed++; missed == 2 {
			f.fail(jetstream.ErrNoHeartbeat)
		}
	}
}

// ackMeta reads a delivery's consumer sequence, stream sequence and pending count from
// its reply subject, as nats.go's Metadata does but without allocating:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>, or with
// <domain>.<account hash> before the stream and possibly more tokens after pending.
func ackMeta(reply string) (cseq, sseq, pending uint64, tm int64, ok bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return 0, 0, 0, 0, false
	}
	var field int // index of rest's first token among stream(0) .. pending(6)
	switch n := strings.Count(rest, ".") + 1; {
	case n == 7:
	case n >= 9:
		field = -2
	default:
		return 0, 0, 0, 0, false
	}
	for ; field <= 6; field++ {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		var dst *uint64
		switch field {
		case 3:
			dst = &sseq
		case 4:
			dst = &cseq
		case 5:
			// The timestamp only helps (watch.set): one that is not a number, which
			// nats.go does not refuse either, is unknown (0).
			if n, isNum := parseSeq(tok); isNum {
				tm = int64(n)
			}
			continue
		case 6:
			dst = &pending
		default:
			continue
		}
		if *dst, ok = parseSeq(tok); !ok {
			return 0, 0, 0, 0, false
		}
	}
	return cseq, sseq, pending, tm, true
}

// parseSeq reads a non-empty run of decimal digits.
func parseSeq(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n, true
}

// release unsubscribes and lets a delivery waiting for start through, to find no
// handler.
func (f *feed) release() {
	_ = f.sub.Unsubscribe()
	f.readyOnce.Do(func() { close(f.ready) })
}

// ifDrained asks the server whether the consumer has delivered everything and has
// nothing pending and, if so (and the feed is not stopped), runs fn under the
// handler's lock, so no handler runs beside it. Messages deleted — expired, purged —
// after the consumer counted them but before it delivered them are never delivered:
// then no message arrives saying nothing is pending, and only this tells.
// A failed request counts as "not yet": heartbeats catch a consumer that is gone.
func (f *feed) ifDrained(ctx context.Context, fn func() error) (bool, error) {
	ictx, cancel := context.WithTimeout(ctx, drainCheckTimeout)
	info, err := f.cons.Info(ictx)
	cancel()
	if err != nil {
		f.r.log.Debug("consumer info", "error", err)
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return true, nil
	}
	if info.NumPending != 0 || info.Delivered.Consumer != f.delivered {
		return false, nil
	}
	return true, fn()
}

func (f *feed) fail(err error) {
	select {
	case f.errc <- err:
	default: // the first failure is the one that matters
	}
}

// Err receives the feed's first failure.
func (f *feed) Err() <-chan error { return f.errc }

// stop ends delivery, waits out a running handler (whose own context must already be
// done if it can block), and deletes the consumer.
func (f *feed) stop(ctx context.Context) {
	f.stopOnce.Do(func() { f.halt(ctx) })
}

func (f *feed) halt(ctx context.Context) {
	close(f.done)
	f.release()
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	del := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := f.r.js.DeleteConsumer(dctx, f.r.cfg.Name, f.cons.CachedInfo().Name); err != nil {
			f.r.log.Debug("delete consumer", "error", err)
		}
	}
	// The deletion is a round trip to the server that the reader does not need
	// to wait for: nothing is delivered once the subscription is gone. Close waits
	// for it; it is counted before the call or watch that stops the feed returns,
	// so before Close can begin to wait.
	f.r.bg.Go(del)
}
