package node

import (
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// Streamed request/reply. RequestStream carries many requests, each with an id of the
// client's, and their answers, in batches both ways: a client with many requests in
// flight pays a few stream messages for many of them rather than two calls (a stream
// each) per round trip. Each request is made as Request makes it (startRequest); its
// answer, failure or timeout is queued for the stream's sender, which sends whatever
// has gathered in one batch. RespondStream is Respond for batches of answers.

// maxStreamInFlight bounds the requests in flight on one RequestStream: the stream's
// reader waits for answers before it reads more.
const maxStreamInFlight = 8192

// reqStream is one RequestStream being served.
type reqStream struct {
	n     *Node
	slots chan struct{} // one per request in flight
	stop  chan struct{} // closed when the stream is given up
	kick  chan struct{} // answers are waiting, or the stream is done

	mu      sync.Mutex
	calls   map[*streamCall]struct{} // in flight
	answers []streamAnswer           // to send
	eof     bool                     // the client sends no more requests
	over    bool                     // given up: answers are no longer sent
	// f is the stream when an answer may be written inline (inline.go; nil: never),
	// as inlineOut.
	f         *framed
	inlineOut answersOut
	one       [1]streamAnswer
}

// streamCall is a request of a RequestStream in flight.
type streamCall struct {
	id    uint64
	token string
	timer *time.Timer
}

func (cs clientServer) RequestStream(s nodev1.NodeService_RequestStreamServer) error {
	rs := &reqStream{n: cs.n, slots: make(chan struct{}, maxStreamInFlight), stop: make(chan struct{}),
		kick: make(chan struct{}, 1), calls: map[*streamCall]struct{}{}}
	if f := framedOf(s.Context()); f != nil && f.raw != nil {
		rs.f = f
	}
	sent := make(chan error, 1)
	go func() { sent <- rs.sendLoop(s) }()
	err := rs.recvLoop(s)
	if err == nil {
		// The client is done sending: answer what is in flight, then end.
		rs.mu.Lock()
		rs.eof = true
		rs.mu.Unlock()
		rs.poke()
		err = <-sent
		rs.abandon()
		return err
	}
	rs.abandon()
	if sendErr := <-sent; sendErr != nil {
		cs.n.cfg.Logger.Debug("request stream: sending answers failed", "node", cs.n.id, "err", sendErr)
	}
	return err
}

// recvLoop reads batches of requests and makes them; nil at the end of the client's
// requests.
func (rs *reqStream) recvLoop(s grpc.ServerStream) error {
	in := publishIn{requests: true}
	src := framedOf(s.Context())
	for {
		err := s.RecvMsg(&in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		single := alone(len(in.reqs), src)
		for i := range in.reqs {
			if !rs.start(s, &in.reqs[i], single) {
				in.free()
				return status.FromContextError(s.Context().Err()).Err()
			}
		}
		in.free()
	}
}

// start makes one request; false when the stream ended while it waited for a slot.
// alone: it came in a batch of its own.
func (rs *reqStream) start(s grpc.ServerStream, r *publishReq, alone bool) bool {
	select {
	case rs.slots <- struct{}{}:
	case <-s.Context().Done():
		return false
	}
	n := rs.n
	c := &streamCall{id: r.id}
	rs.mu.Lock()
	rs.calls[c] = struct{}{}
	rs.mu.Unlock()
	if r.bad != nil {
		rs.finish(c, failedAnswer(c.id, r.bad), false)
		return true
	}
	name := r.name
	timeout := requestTimeout(time.Duration(r.timeoutMs) * time.Millisecond)
	token, err := n.startRequest(name, r.payload, timeout, alone, func(rep reply) {
		a := streamAnswer{ID: c.id}
		if got, err := n.replied(name, rep); err != nil {
			a = failedAnswer(c.id, err)
		} else {
			a.Payload, a.Responder = got.Payload, got.Responder
		}
		rs.finish(c, a, rep.alone)
	})
	if err != nil {
		rs.finish(c, failedAnswer(c.id, err), false)
		return true
	}
	rs.mu.Lock()
	if _, ok := rs.calls[c]; ok && !rs.over {
		c.token = token
		c.timer = time.AfterFunc(timeout, func() {
			// Whoever takes the token answers: here, the timeout.
			if n.paths.take(token, false) != nil {
				rs.finish(c, failedAnswer(c.id, n.timedOut(name, timeout)), false)
			}
		})
	}
	rs.mu.Unlock()
	return true
}

func failedAnswer(id uint64, err error) streamAnswer {
	st := status.Convert(requestStatus(err))
	return streamAnswer{ID: id, Code: uint32(st.Code()), Error: st.Message()}
}

// finish sends c's answer: queued for the sender, or, when it came alone and none is
// queued, written inline (inline.go) unless the sender is writing.
func (rs *reqStream) finish(c *streamCall, a streamAnswer, alone bool) {
	rs.mu.Lock()
	if _, ok := rs.calls[c]; !ok || rs.over {
		rs.mu.Unlock()
		return
	}
	delete(rs.calls, c)
	if c.timer != nil {
		c.timer.Stop()
	}
	sent := alone && len(rs.answers) == 0 && rs.writeInline(a)
	if !sent {
		rs.answers = append(rs.answers, a)
	}
	// The sender ends the stream once the last answer is sent.
	wake := !sent || (rs.eof && len(rs.calls) == 0)
	rs.mu.Unlock()
	<-rs.slots
	if wake {
		rs.poke()
	}
}

// writeInline writes a as a batch of its own if the stream takes it at once. Answers
// need no order (each names its request), so the sender may be between batches.
// Callers hold rs.mu.
func (rs *reqStream) writeInline(a streamAnswer) bool {
	if rs.f == nil {
		return false
	}
	rs.one[0] = a
	rs.inlineOut.answers = rs.one[:]
	ok := rs.f.tryWriteMsg(&rs.inlineOut)
	rs.inlineOut.answers, rs.one[0] = nil, streamAnswer{}
	return ok
}

func (rs *reqStream) poke() {
	select {
	case rs.kick <- struct{}{}:
	default:
	}
}

// abandon gives the stream up: the requests still in flight are forgotten (their
// answers, should they come, are dropped as answers to unknown requests are).
func (rs *reqStream) abandon() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.over {
		return
	}
	rs.over = true
	close(rs.stop)
	for c := range rs.calls {
		if c.timer != nil {
			c.timer.Stop()
		}
		if c.token != "" && rs.n.paths.take(c.token, false) != nil {
			rs.n.metrics.requests.WithLabelValues("timeout").Inc()
		}
	}
	clear(rs.calls)
	rs.answers = nil
}

// sendLoop sends the answers as they come, all those waiting in one batch (or a few,
// to keep a batch within maxBatchBytes). It ends when the client has sent its last
// request and every request is answered, or when the stream is given up.
func (rs *reqStream) sendLoop(s grpc.ServerStream) error {
	out := &answersOut{}
	var spare []streamAnswer
	for {
		select {
		case <-rs.kick:
		case <-rs.stop:
			return nil
		case <-s.Context().Done():
			return nil
		}
		rs.mu.Lock()
		batch := rs.answers
		rs.answers = spare[:0]
		finished := rs.eof && len(rs.calls) == 0
		rs.mu.Unlock()
		for rest := batch; len(rest) > 0; {
			k, size := 1, wire.SizeField(rest[0].Size())
			for k < len(rest) && size < maxBatchBytes {
				size += wire.SizeField(rest[k].Size())
				k++
			}
			out.answers = rest[:k]
			err := s.SendMsg(out)
			out.answers = nil
			if err != nil {
				return err
			}
			rest = rest[k:]
		}
		clear(batch)
		spare = batch[:0]
		if finished {
			return nil
		}
	}
}

// RespondStream answers requests in batches. An answer refused is reported in the
// stream's next response, and the stream goes on; the last response, once the client
// closed its side, has the totals.
func (cs clientServer) RespondStream(s nodev1.NodeService_RespondStreamServer) error {
	n := cs.n
	var in respondIn
	var answered, refused uint64
	resp := &nodev1.RespondStreamResponse{}
	src := framedOf(s.Context())
	for {
		err := s.RecvMsg(&in)
		if errors.Is(err, io.EOF) {
			return s.Send(&nodev1.RespondStreamResponse{Answered: answered, Refused: refused, Final: true})
		}
		if err != nil {
			return err
		}
		resp.Failures = resp.Failures[:0]
		single := alone(len(in.answers), src)
		for _, a := range in.answers {
			if err := n.respond(string(a.token), a.payload, true, single); err != nil {
				refused++
				st := status.Convert(requestStatus(err))
				resp.Failures = append(resp.Failures, &nodev1.RespondFailure{ReplyTo: string(a.token), Code: uint32(st.Code()), Error: st.Message()})
				continue
			}
			answered++
		}
		in.free()
		if len(resp.Failures) > 0 {
			if err := s.Send(resp); err != nil {
				return err
			}
		}
	}
}
