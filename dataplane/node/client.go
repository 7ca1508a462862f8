package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// clientServer is the API local clients publish and subscribe through.
type clientServer struct {
	nodev1.UnimplementedNodeServiceServer
	n *Node
}

// maxDeliveryBatch bounds the messages of one SubscribeResponse.
const maxDeliveryBatch = 128

// Errors Publish returns; the API maps them to status codes.
var (
	ErrTooLarge   = errors.New("message too large")
	ErrNoRoute    = errors.New("no subscriber reachable")
	ErrQueuesFull = errors.New("every queue for the message is full")
)

// Publish forwards one message published at this node; wait bounds how long it may be
// held up by a full queue (backpressure). It returns what became of the copies.
func (n *Node) Publish(name dataplane.Name, payload []byte, broadcast bool) (forwarded, dropped int, err error) {
	if err := checkComponents(name); err != nil {
		return 0, 0, fmt.Errorf("%w %q: %w", ErrBadName, name, err)
	}
	if err := n.checkSize(payload); err != nil {
		return 0, 0, err
	}
	return n.publish(qmsg{m: newMsg(name, payload, broadcast, n.cfg.MaxHops, n.id, n.seq.Add(1), time.Now().UnixNano()), alone: true}, name)
}

func (n *Node) checkSize(payload []byte) error {
	if len(payload) > n.cfg.MaxMessageBytes {
		return fmt.Errorf("%w: payload is %d bytes; the limit is %d bytes (max_message_bytes)", ErrTooLarge, len(payload), n.cfg.MaxMessageBytes)
	}
	return nil
}

// publish forwards q, published at this node, to name's subscribers.
func (n *Node) publish(q qmsg, name dataplane.Name) (forwarded, dropped int, err error) {
	n.metrics.published.Inc()
	o := n.forward(q, name, nil, n.cfg.PublishWait)
	switch {
	case !o.routable:
		n.metrics.unroutable.Inc()
		return 0, 0, fmt.Errorf("%w: nobody reachable from node %s subscribes to %s", ErrNoRoute, n.id, name)
	case o.forwarded == 0:
		return 0, o.dropped, fmt.Errorf("%w: %s dropped", ErrQueuesFull, name)
	}
	return o.forwarded, o.dropped, nil
}

func publishStatus(err error) error {
	switch {
	case errors.Is(err, ErrBadName), errors.Is(err, ErrTooLarge):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNoRoute):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrQueuesFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (cs clientServer) Publish(_ context.Context, req *nodev1.PublishRequest) (*nodev1.PublishResponse, error) {
	name, err := nameFromProto(req.GetName())
	if err != nil {
		return nil, publishStatus(err)
	}
	fwd, drop, err := cs.n.Publish(name, req.GetPayload(), req.GetBroadcast())
	if err != nil {
		return nil, publishStatus(err)
	}
	return &nodev1.PublishResponse{Forwarded: uint32(fwd), Dropped: uint32(drop)}, nil
}

// PublishStream counts rather than refuses: a message nobody subscribes to, or whose
// queues are full, does not end the stream. A malformed one does.
//
// A batch is read in its wire form (wire.go): the names decoded through a cache, the
// payloads left in gRPC's buffer, and every message of the batch encoded for the
// links into one allocation.
func (cs clientServer) PublishStream(s nodev1.NodeService_PublishStreamServer) error {
	n := cs.n
	resp := &nodev1.PublishStreamResponse{}
	var in publishIn
	src := framedOf(s.Context())
	for {
		err := s.RecvMsg(&in)
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(resp)
		}
		if err != nil {
			return err
		}
		err = n.publishBatch(&in, resp, alone(len(in.reqs), src))
		in.free()
		if err != nil {
			return err
		}
	}
}

// publishBatch publishes a batch; single: it is a batch of one that may be written
// inline (alone).
func (n *Node) publishBatch(in *publishIn, resp *nodev1.PublishStreamResponse, single bool) error {
	size := 0
	for _, r := range in.reqs {
		size += publishedSize(r.name, len(r.payload), n.id)
	}
	// The batch's messages are encoded into one pooled buffer, given back when the
	// last copy is sent or dropped.
	buf := sharedPool.Get(size)
	cu := bufferCustody(mem.NewBuffer(buf, sharedPool))
	defer cu.release()
	arena := (*buf)[:0]
	msgs := make([]msg, len(in.reqs))
	// One reading of the clock for the batch, whose messages came in together: a
	// reading per message was 2 % of a throughput run's CPU.
	at := time.Now().UnixNano()
	for i, r := range in.reqs {
		err := r.bad
		if err == nil {
			err = n.checkSize(r.payload)
		}
		if err != nil {
			return publishStatus(fmt.Errorf("message %d: %w", resp.Accepted+1, err))
		}
		start := len(arena)
		arena = appendPublished(arena, r.name, r.payload, r.broadcast, n.id, n.seq.Add(1), at)
		m := &msgs[i]
		m.Raw, m.TTL, m.Broadcast = arena[start:len(arena):len(arena)], n.cfg.MaxHops, r.broadcast
		fwd, drop, err := n.publish(qmsg{m, cu, single}, r.name)
		switch {
		case errors.Is(err, ErrNoRoute):
			resp.Unroutable++
		case errors.Is(err, ErrQueuesFull):
		case err != nil:
			return publishStatus(fmt.Errorf("message %d: %w", resp.Accepted+1, err))
		}
		resp.Accepted++
		resp.Forwarded += uint64(fwd)
		resp.Dropped += uint64(drop)
	}
	return nil
}

func (cs clientServer) Subscribe(req *nodev1.SubscribeRequest, s nodev1.NodeService_SubscribeServer) error {
	name, err := nameFromProto(req.GetName())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	sub := cs.n.SubscribeLocal(name)
	defer cs.n.UnsubscribeLocal(sub.id)
	if err := s.Send(&nodev1.SubscribeResponse{SubscriptionId: sub.id}); err != nil {
		return err
	}
	sub.gate.set(framedOf(s.Context()))
	return cs.n.deliverTo(s, sub)
}

// deliverTo streams sub's messages to its client until either ends. The sending runs
// on a goroutine of its own: a client that stops reading blocks it in SendMsg once
// the stream's flow-control window is full, and when the node cuts such a subscriber
// off, the handler must still return (ending the stream, which unblocks the sender).
func (n *Node) deliverTo(s nodev1.NodeService_SubscribeServer, sub *localSub) error {
	sent := make(chan error, 1)
	go func() { sent <- n.sendLoop(s, sub) }()
	select {
	case err := <-sent:
		return err
	case <-sub.done:
		if sub.err != nil {
			return status.Error(codes.ResourceExhausted, sub.err.Error())
		}
		return <-sent
	}
}

// sendLoop sends sub's messages in batches. A copy is done with (its custody
// released) once its batch is sent, or dropped and counted.
func (n *Node) sendLoop(s nodev1.NodeService_SubscribeServer, sub *localSub) error {
	batch := make([]*msg, 0, maxDeliveryBatch)
	held := make([]*custody, 0, maxDeliveryBatch)
	out := &deliveryOut{}
	for {
		select {
		case <-s.Context().Done():
			return nil
		case <-sub.done:
			return nil
		case q := <-sub.ch:
			batch, held = append(batch[:0], q.m), append(held[:0], q.cu)
			batch, held = fillDelivery(sub, batch, held)
			// Encoded by the codec within SendMsg, from the messages' wire form.
			out.msgs = batch
			sub.gate.mu.Lock()
			err := s.SendMsg(out)
			sub.gate.queued.Add(-int64(len(batch)))
			sub.gate.mu.Unlock()
			out.msgs = nil
			if err != nil {
				sub.m.dropped(reasonLinkBroken).Add(float64(len(batch)))
			} else {
				n.metrics.delivered.Add(float64(len(batch)))
			}
			releaseAll(held)
			clear(held)
			if err != nil {
				return err
			}
		}
	}
}

// fillDelivery adds queued messages to a delivery batch, without waiting, up to the
// batching bounds: by count, and by bytes, so that a batch of large messages stays
// within the stream's message size limit.
func fillDelivery(sub *localSub, batch []*msg, held []*custody) ([]*msg, []*custody) {
	size := batch[0].Size()
	for len(batch) < maxDeliveryBatch && size < maxBatchBytes {
		select {
		case q := <-sub.ch:
			batch, held = append(batch, q.m), append(held, q.cu)
			size += q.m.Size()
		default:
			return batch, held
		}
	}
	return batch, held
}

func (cs clientServer) Unsubscribe(_ context.Context, req *nodev1.UnsubscribeRequest) (*nodev1.UnsubscribeResponse, error) {
	if !cs.n.UnsubscribeLocal(req.GetSubscriptionId()) {
		return nil, status.Errorf(codes.NotFound, "no subscription %d on node %s", req.GetSubscriptionId(), cs.n.id)
	}
	return &nodev1.UnsubscribeResponse{}, nil
}

// SubscribeLocal adds a local subscriber of name. A subscriber of an instance
// ("org/ns/svc/7") is also one of the service ("org/ns/svc"): it takes messages sent
// to its instance and its share of those sent to any instance.
func (n *Node) SubscribeLocal(name dataplane.Name) *localSub {
	s := &localSub{name: name, ch: make(chan qmsg, n.cfg.SubscriberQueueLen), done: make(chan struct{}), m: n.metrics.local,
		policy: n.cfg.SlowConsumer, onSlow: n.cutOff, onRequest: n.paths.gaveTo, delivered: n.metrics.delivered}
	n.annMu.Lock()
	defer n.annMu.Unlock()
	n.mu.Lock()
	n.nextLocal++
	s.id = n.nextLocal
	n.locals[s.id] = s
	n.mu.Unlock()
	for _, nm := range namesOf(name) {
		n.tab.addLocal(nm, s)
		n.changeOffer(nm, 1, 0)
	}
	return s
}

func namesOf(name dataplane.Name) []dataplane.Name {
	if name.HasID() {
		return []dataplane.Name{name, base(name)}
	}
	return []dataplane.Name{name}
}

// UnsubscribeLocal ends local subscription id; false when there is none.
func (n *Node) UnsubscribeLocal(id uint64) bool { return n.endLocal(id, nil) }

// cutOff ends a subscriber that does not keep up (SlowConsumerDisconnect).
func (n *Node) cutOff(s *localSub) {
	why := fmt.Errorf("slow consumer: subscription %d to %s fell %d messages behind (the subscriber queue bound, subscriber_queue_len) on node %s and was cut off",
		s.id, s.name, cap(s.ch), n.id)
	if n.endLocal(s.id, why) {
		n.metrics.slowConsumers.Inc()
		n.cfg.Logger.Warn("slow consumer cut off", "node", n.id, "subscription", s.id, "name", s.name.String(), "bound", cap(s.ch))
	}
}

// endLocal ends local subscription id, why (nil: at the client's wish) telling its
// client why; false when there is none.
func (n *Node) endLocal(id uint64, why error) bool {
	n.annMu.Lock()
	defer n.annMu.Unlock()
	n.mu.Lock()
	s, ok := n.locals[id]
	delete(n.locals, id)
	n.mu.Unlock()
	if !ok {
		return false
	}
	for _, nm := range namesOf(s.name) {
		n.tab.removeLocal(nm, s)
		n.changeOffer(nm, -1, 0)
	}
	s.end(why)
	n.subscriberLeft(s)
	return true
}

func (n *Node) endLocals() {
	n.mu.Lock()
	ids := make([]uint64, 0, len(n.locals))
	for id := range n.locals {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.UnsubscribeLocal(id)
	}
}

func (n *Node) localSubCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.locals)
}
