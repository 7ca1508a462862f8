package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// feedHeartbeat is the consumer's idle heartbeat; two missed ones fail the feed,
// which is how a reader notices that its consumer vanished with a server.
const feedHeartbeat = 5 * time.Second

// drainCheckTimeout bounds one consumer info request of feed.ifDrained.
const drainCheckTimeout = 5 * time.Second

var errGap = errors.New("consumer skipped a delivery")

// feed reads a filter's last message per subject, then every later message, through
// an ephemeral push consumer with flow control — the shape of an ordered consumer.
//
// Push rather than pull: in a cluster, a pull request sent before the new consumer's
// request subscription has crossed the routes finds no responder, and the pull
// stalls until heartbeats time out; a push consumer simply starts delivering once
// our subscription's interest reaches it. Flow control makes a slow handler throttle the server instead of
// overflowing the subscription.
type feed struct {
	r       *driver
	cons    jetstream.PushConsumer
	cc      jetstream.ConsumeContext
	pending uint64 // messages matching at creation: the snapshot's size

	mu        sync.Mutex // held while the handler runs
	stopped   bool
	delivered uint64
	errc      chan error
}

// feedHandler receives each message, in stream order, with its stream sequence and
// the consumer's count of messages still pending after it.
type feedHandler func(subject string, seq uint64, h nats.Header, data []byte, pending uint64) error

// openFeed creates the consumer for the subjects matching any of filters. A
// headers-only feed delivers no payloads.
func (r *driver) openFeed(ctx context.Context, filters []string, headersOnly bool) (*feed, error) {
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
	cons, err := r.js.CreatePushConsumer(ctx, r.cfg.Name, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	return &feed{r: r, cons: cons, pending: cons.CachedInfo().NumPending, errc: make(chan error, 1)}, nil
}

// start delivers messages to fn on the subscription's goroutine until stop or the
// first failure, which Err then reports.
func (f *feed) start(fn feedHandler) error {
	cc, err := f.cons.Consume(func(msg jetstream.Msg) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.stopped {
			return
		}
		meta, err := msg.Metadata()
		if err == nil && meta.Sequence.Consumer != f.delivered+1 {
			// No acks means the server counts a message lost in flight as
			// delivered: only the consumer sequence shows the hole.
			err = fmt.Errorf("%w: got consumer sequence %d after %d", errGap, meta.Sequence.Consumer, f.delivered)
		}
		if err == nil {
			f.delivered = meta.Sequence.Consumer
			err = fn(msg.Subject(), meta.Sequence.Stream, msg.Headers(), msg.Data(), meta.NumPending)
		}
		if err != nil {
			f.fail(err)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// Missed heartbeats, a deleted consumer, a leader change: the feed can no
		// longer promise every message.
		f.fail(err)
	}))
	if err != nil {
		return err
	}
	f.cc = cc
	return nil
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
	if f.cc != nil {
		f.cc.Stop()
	}
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
	// to wait for: nothing is delivered once Stop returns. Close waits for it; it
	// is counted before the call or watch that stops the feed returns, so before
	// Close can begin to wait.
	f.r.bg.Go(del)
}
