package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// replier is one system set up for request/reply: a requester on one side, a
// responder that echoes each request on the other.
type replier interface {
	name() string
	// request sends p and waits for the answer, for at most timeout.
	request(ctx context.Context, p []byte, timeout time.Duration) error
	close()
}

// reqrepResult is a request/reply run.
type reqrepResult struct {
	system         string
	perSec         float64
	inFlight       int
	p50, p99       time.Duration
	failed         uint64
	latencySamples int
	firstErr       string
}

// requestTimeout bounds every request of the bench.
const requestTimeout = 5 * time.Second

// maxFailed ends a throughput run early: something is broken, and each failure may
// have taken requestTimeout.
const maxFailed = 100

// measureReqRep runs o.requests requests from o.requesters concurrent requesters,
// then paced requests at o.rate for o.latencyFor, each timed on its own.
func measureReqRep(ctx context.Context, q replier, o options) (reqrepResult, error) {
	r := reqrepResult{system: q.name(), inFlight: o.requesters}
	payload := make([]byte, o.size)
	// Warm up until a request is answered (routes, interest propagation).
	if err := waitFor(ctx, func() bool {
		return q.request(ctx, payload, 200*time.Millisecond) == nil
	}); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	for range 100 {
		_ = q.request(ctx, payload, requestTimeout)
	}
	var failed atomic.Uint64
	var firstErr atomic.Value
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	// Throughput: each requester makes one request after the other.
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.requesters {
		wg.Go(func() {
			p := make([]byte, o.size)
			for next.Add(1) <= int64(o.requests) && ctx.Err() == nil && failed.Load() < maxFailed {
				if err := q.request(ctx, stamp(p), requestTimeout); err != nil {
					fail(err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.perSec = float64(ok.Load()) / time.Since(start).Seconds()
	// Latency: paced, each request on its own goroutine so a slow one does not hold
	// up the next.
	time.Sleep(200 * time.Millisecond)
	var mu sync.Mutex
	var ds []time.Duration
	pace(ctx, o.rate, o.latencyFor, func() bool {
		wg.Go(func() {
			p := make([]byte, o.size)
			t0 := time.Now()
			if err := q.request(ctx, p, requestTimeout); err != nil {
				fail(err)
				return
			}
			d := time.Since(t0)
			mu.Lock()
			ds = append(ds, d)
			mu.Unlock()
		})
		return true
	})
	wg.Wait() // every request ends within requestTimeout
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.failed = failed.Load()
	if s, ok := firstErr.Load().(string); ok {
		r.firstErr = s
	}
	if len(ds) == 0 {
		return r, errors.New("no latency samples")
	}
	slices.Sort(ds)
	r.p50, r.p99, r.latencySamples = ds[len(ds)/2], ds[len(ds)*99/100], len(ds)
	return r, nil
}

// natsReplier: requester on server 1, responder (Subscribe + msg.Respond) on server 2
// of two routed servers.
type natsReplier struct {
	servers        []*server.Server
	requester, rsp *nats.Conn
}

func startNATSReqRep(ctx context.Context, _ options) (replier, error) {
	s1, s2, err := startRoutedPair(ctx)
	if err != nil {
		return nil, err
	}
	q := &natsReplier{servers: []*server.Server{s1, s2}}
	if q.rsp, err = nats.Connect(s2.ClientURL()); err != nil {
		q.close()
		return nil, err
	}
	sub, err := q.rsp.Subscribe("bench.req", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		q.close()
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := q.rsp.Flush(); err != nil {
		q.close()
		return nil, err
	}
	if q.requester, err = nats.Connect(s1.ClientURL()); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *natsReplier) name() string { return "NATS core (2 servers, route)" }

func (q *natsReplier) request(ctx context.Context, p []byte, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := q.requester.RequestWithContext(rctx, "bench.req", p)
	return err
}

func (q *natsReplier) close() {
	for _, nc := range []*nats.Conn{q.requester, q.rsp} {
		if nc != nil {
			nc.Close()
		}
	}
	shutdown(q.servers)
}

// nodeReplier: requester at a/n1, one RequestStream (node.Requester) carrying every
// request in flight; responder at b/n1: a Subscribe stream whose requests are answered
// over one RespondStream, the answers to each delivered batch of requests in one
// batch, so answers overlap as NATS's buffered msg.Respond lets them.
type nodeReplier struct {
	nf        *nodeFabric
	reqConn   clientConn
	rspConn   clientConn
	requester *node.Requester
	subject   *nodev1.Name
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func startNodeReqRep(ctx context.Context, _ options) (replier, error) {
	nf, err := startFabric(ctx, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	if err != nil {
		return nil, err
	}
	q := &nodeReplier{nf: nf, subject: mustName("bench/dp/req")}
	if q.reqConn, err = dial(nf.f.Node("a/n1").Addr()); err != nil {
		q.close()
		return nil, err
	}
	if q.rspConn, err = dial(nf.f.Node("b/n1").Addr()); err != nil {
		q.close()
		return nil, err
	}
	rsp := nodev1.NewNodeServiceClient(q.rspConn)
	var sctx context.Context
	sctx, q.cancel = context.WithCancel(context.Background())
	if q.requester, err = node.NewRequester(sctx, nodev1.NewNodeServiceClient(q.reqConn)); err != nil {
		q.close()
		return nil, err
	}
	st, err := rsp.Subscribe(sctx, &nodev1.SubscribeRequest{Name: q.subject})
	if err != nil {
		q.close()
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		q.close()
		return nil, err
	}
	answers, err := rsp.RespondStream(sctx)
	if err != nil {
		q.close()
		return nil, err
	}
	// Refused answers are reported back; the bench sees them as timeouts.
	q.wg.Go(func() {
		for {
			if _, err := answers.Recv(); err != nil {
				return
			}
		}
	})
	q.wg.Go(func() {
		b := &nodev1.RespondBatch{}
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			b.Answers = b.Answers[:0]
			for _, m := range r.GetMessages() {
				if m.GetReplyTo() != "" {
					b.Answers = append(b.Answers, &nodev1.RespondRequest{ReplyTo: m.GetReplyTo(), Payload: m.GetPayload()})
				}
			}
			if len(b.Answers) > 0 && answers.Send(b) != nil {
				return
			}
		}
	})
	return q, nil
}

func (q *nodeReplier) name() string { return "switchboard node (2 groups, link)" }

func (q *nodeReplier) request(ctx context.Context, p []byte, timeout time.Duration) error {
	// The client's deadline a little beyond the node's, so the node's answer (a
	// timeout included) is what comes back.
	rctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	_, err := q.requester.Request(rctx, &nodev1.RequestRequest{Name: q.subject, Payload: p, TimeoutMs: uint32(timeout / time.Millisecond)})
	return err
}

func (q *nodeReplier) close() {
	if q.requester != nil {
		_ = q.requester.Close()
	}
	if q.cancel != nil {
		q.cancel()
	}
	q.wg.Wait()
	for _, cc := range []clientConn{q.reqConn, q.rspConn} {
		if cc != nil {
			_ = cc.Close()
		}
	}
	q.nf.close()
}
