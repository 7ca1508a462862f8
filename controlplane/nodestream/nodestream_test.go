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
