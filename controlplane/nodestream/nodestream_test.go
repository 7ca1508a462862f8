package nodestream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// peer is the node end: it records what the CP sent and can answer.
type peer struct {
	mu   sync.Mutex
	sent chan *controllerv1.ControlMessage
	fail error
}

func newPeer() *peer { return &peer{sent: make(chan *controllerv1.ControlMessage, 16)} }

func (p *peer) send(m *controllerv1.ControlMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.sent <- m
	return nil
}

func listReq() *controllerv1.ControlMessage {
	return &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}}}
}

func reply(to *controllerv1.ControlMessage) *controllerv1.ControlMessage {
	return &controllerv1.ControlMessage{MessageId: "r-" + to.MessageId, ReplyTo: to.MessageId,
		Payload: &controllerv1.ControlMessage_ConnectionListResponse{ConnectionListResponse: &controllerv1.ConnectionListResponse{
			Entries: []*controllerv1.ConnectionEntry{{LinkId: "l1"}}}}}
}

func TestRequestMatchesResponseByID(t *testing.T) {
	h := New(10 * time.Second)
	p := newPeer()
	s := h.Add("g/n1", p.send)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two requests in flight, answered in reverse order: each gets its own answer.
	type result struct {
		resp *controllerv1.ControlMessage
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			r, err := h.Request(ctx, "g/n1", listReq())
			results <- result{r, err}
		}()
	}
	first, second := <-p.sent, <-p.sent
	if first.MessageId == "" || first.MessageId == second.MessageId {
		t.Fatalf("message ids %q and %q must be set and distinct", first.MessageId, second.MessageId)
	}
	if s.Deliver(&controllerv1.ControlMessage{ReplyTo: "nobody"}) {
		t.Fatal("a response nobody waits for was delivered")
	}
	s.Deliver(reply(second))
	s.Deliver(reply(first))
	for range 2 {
		r := <-results
		if r.err != nil || r.resp.GetReplyTo() == "" || r.resp.MessageId != "r-"+r.resp.ReplyTo {
			t.Fatalf("response %+v, %v", r.resp, r.err)
		}
	}
}

func TestRemoveFailsWaitersAtOnce(t *testing.T) {
	h := New(time.Hour) // the test would hang for an hour if waiters were not released
	p := newPeer()
	s := h.Add("g/n1", p.send)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := h.Request(ctx, "g/n1", listReq())
		errs <- err
	}()
	<-p.sent
	if !h.Remove(s) {
		t.Fatal("Remove of the current stream reported false")
	}
	if err := <-errs; !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("waiter got %v, want ErrStreamClosed", err)
	}
	if h.Connected("g/n1") {
		t.Fatal("node still connected after Remove")
	}
	if _, err := h.Request(ctx, "g/n1", listReq()); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("request to a gone node: %v", err)
	}
}

func TestReconnectReplacesStream(t *testing.T) {
	h := New(time.Hour)
	oldPeer, newPeer := newPeer(), newPeer()
	old := h.Add("g/n1", oldPeer.send)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := h.Request(ctx, "g/n1", listReq())
		errs <- err
	}()
	<-oldPeer.sent
	h.Add("g/n1", newPeer.send)
	if err := <-errs; !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("waiter on the replaced stream got %v", err)
	}
	// The old stream's read loop ends later: it must not disconnect the new one.
	if h.Remove(old) {
		t.Fatal("Remove of a replaced stream reported it current")
	}
	if !h.Connected("g/n1") {
		t.Fatal("removing the old stream disconnected the new one")
	}
	if err := h.Send("g/n1", listReq()); err != nil {
		t.Fatal(err)
	}
	if m := <-newPeer.sent; m.MessageId == "" {
		t.Fatal("Send must fill the message id")
	}
}

func TestTimeoutAndSendFailure(t *testing.T) {
	h := New(50 * time.Millisecond)
	p := newPeer()
	h.Add("g/n1", p.send)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.Request(ctx, "g/n1", listReq()); !errors.Is(err, ErrTimeout) {
		t.Fatalf("unanswered request: %v, want ErrTimeout", err)
	}
	p.fail = errors.New("broken pipe")
	if _, err := h.Request(ctx, "g/n1", listReq()); err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("a failed send must fail the request at once, got %v", err)
	}
	if got := h.Nodes(); len(got) != 1 || got[0] != "g/n1" {
		t.Fatalf("Nodes = %v", got)
	}
}

// stuckPeer is a node that stops reading after its first message: every later send
// blocks, as gRPC's does once the flow-control window is full, until the stream ends.
type stuckPeer struct {
	mu      sync.Mutex
	first   chan *controllerv1.ControlMessage
	n       int
	ended   chan struct{}
	overlap bool // two sends ran at once
	inSend  bool
}

func newStuckPeer() *stuckPeer {
	return &stuckPeer{first: make(chan *controllerv1.ControlMessage, 1), ended: make(chan struct{})}
}

func (p *stuckPeer) send(m *controllerv1.ControlMessage) error {
	p.mu.Lock()
	p.n++
	n := p.n
	p.overlap = p.overlap || p.inSend
	p.inSend = true
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.inSend = false; p.mu.Unlock() }()
	if n == 1 {
		p.first <- m
		return nil
	}
	<-p.ended
	return errors.New("stream ended")
}

// TestSendDeadlineEvictsSlowNode: a send that cannot go out within the send deadline
// closes the stream (ErrSendTimeout); the request already waiting for an answer and
// the send queued behind the stuck one fail at once, and Done tells the owner.
func TestSendDeadlineEvictsSlowNode(t *testing.T) {
	h := New(time.Hour, WithSendTimeout(100*time.Millisecond))
	p := newStuckPeer()
	s := h.Add("g/n1", p.send)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	waiting := make(chan error, 1)
	go func() {
		_, err := h.Request(ctx, "g/n1", listReq()) // goes out, never answered
		waiting <- err
	}()
	<-p.first
	stuck := make(chan error, 1)
	go func() { stuck <- h.Send("g/n1", listReq()) }() // blocks in the peer
	queued := make(chan error, 1)
	go func() { queued <- h.Send("g/n1", listReq()) }() // waits for its turn

	for what, ch := range map[string]chan error{"stuck send": stuck, "queued send": queued, "waiting request": waiting} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrStreamClosed) {
				t.Fatalf("%s: %v, want ErrStreamClosed", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still blocked after the send deadline", what)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after the eviction")
	}
	if !errors.Is(s.Err(), ErrSendTimeout) {
		t.Fatalf("Err() = %v, want ErrSendTimeout", s.Err())
	}
	if err := h.Send("g/n1", listReq()); !errors.Is(err, ErrSendTimeout) {
		t.Fatalf("send after the eviction: %v", err)
	}
	// The owner ends the RPC: the blocked send returns; sends never overlapped.
	close(p.ended)
	h.Remove(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overlap {
		t.Fatal("two sends ran on the stream at once")
	}
}

func TestReplacedStreamSaysWhy(t *testing.T) {
	h := New(time.Hour)
	old := h.Add("g/n1", newPeer().send)
	h.Add("g/n1", newPeer().send)
	select {
	case <-old.Done():
	default:
		t.Fatal("the replaced stream's Done is open")
	}
	if !errors.Is(old.Err(), ErrReplaced) {
		t.Fatalf("Err() = %v, want ErrReplaced", old.Err())
	}
	if err := old.Send(listReq()); !errors.Is(err, ErrStreamClosed) || !errors.Is(err, ErrReplaced) {
		t.Fatalf("send on the replaced stream: %v", err)
	}
}
