package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

func nameOf(t *testing.T, s string) *nodev1.Name {
	t.Helper()
	n, err := node.ParseName(s)
	if err != nil {
		t.Fatal(err)
	}
	return node.NameProto(n)
}

// streamRespond subscribes to name and answers every request with "tag:payload" over
// one RespondStream, one batch of answers per batch of requests delivered. Refusals
// the node reports go to failures.
func (c *client) streamRespond(name, tag string) (failures chan *nodev1.RespondFailure) {
	c.t.Helper()
	s := c.subscribe(name)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.RespondStream(ctx)
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	failures = make(chan *nodev1.RespondFailure, 1000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			for _, f := range r.GetFailures() {
				select {
				case failures <- f:
				default:
				}
			}
		}
	})
	wg.Go(func() {
		for m := range s.ch {
			if m.GetReplyTo() == "" {
				continue
			}
			b := &nodev1.RespondBatch{Answers: []*nodev1.RespondRequest{{ReplyTo: m.GetReplyTo(), Payload: []byte(tag + ":" + string(m.GetPayload()))}}}
			for more := true; more; {
				select {
				case m, ok := <-s.ch:
					if !ok {
						more = false
						break
					}
					if m.GetReplyTo() != "" {
						b.Answers = append(b.Answers, &nodev1.RespondRequest{ReplyTo: m.GetReplyTo(), Payload: []byte(tag + ":" + string(m.GetPayload()))})
					}
				default:
					more = false
				}
			}
			if st.Send(b) != nil {
				return
			}
		}
	})
	c.t.Cleanup(func() {
		cancel()
		s.cancel()
		wg.Wait()
	})
	return failures
}

// recvAnswers reads answers from st until want of them came.
func recvAnswers(t *testing.T, st nodev1.NodeService_RequestStreamClient, want int) map[uint64]*nodev1.RequestResponse {
	t.Helper()
	got := map[uint64]*nodev1.RequestResponse{}
	for len(got) < want {
		b, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d of %d answers: %v", len(got), want, err)
		}
		for _, a := range b.GetResponses() {
			if _, dup := got[a.GetId()]; dup {
				t.Fatalf("request %d answered twice", a.GetId())
			}
			got[a.GetId()] = a
		}
	}
	return got
}

// TestRequestStreamManyInFlightAcrossLink: requests made in group a over one
// RequestStream, 300 of them in flight at once, reach a responder in group b that
// answers over one RespondStream; every answer comes back with its request's id, and
// the stream ends cleanly once the client has sent its last request and every one is
// answered.
func TestRequestStreamManyInFlightAcrossLink(t *testing.T) {
	f := startFabric(t, pair, 1, "a", "b")
	failures := clientOf(t, f, "b/n1").streamRespond("org/ns/echo", "b")
	req := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitAnswered(t, ctx, req, "org/ns/echo")
	st, err := req.RequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const total, perBatch = 300, 100
	name := nameOf(t, "org/ns/echo")
	for first := 1; first <= total; first += perBatch {
		b := &nodev1.RequestBatch{}
		for id := first; id < first+perBatch; id++ {
			b.Requests = append(b.Requests, &nodev1.RequestRequest{Name: name, Payload: fmt.Appendf(nil, "p%d", id), TimeoutMs: 10000, Id: uint64(id)})
		}
		if err := st.Send(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := recvAnswers(t, st, total)
	for id := 1; id <= total; id++ {
		a := got[uint64(id)]
		if a == nil || a.GetCode() != 0 || string(a.GetPayload()) != fmt.Sprint("b:p", id) || a.GetResponder() != "b/n1" {
			t.Fatalf("request %d: answer %v, want b:p%d from b/n1", id, a, id)
		}
	}
	if b, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last answer: %v, %v; want the stream's end", b, err)
	}
	select {
	case f := <-failures:
		t.Fatalf("an answer was refused: %v", f)
	default:
	}
}

// TestRequestStreamFailuresDoNotEndIt: on one stream, a request nobody subscribes to,
// an oversized one, one with a bad name and one nobody answers in time are each
// answered with their status and id, among answered ones; the stream goes on serving
// requests after them.
func TestRequestStreamFailuresDoNotEndIt(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: "links: []\n", Node: func(c *node.Config) { c.MaxMessageBytes = 1000 }}, 1, "a")
	c := clientOf(t, f, "a/n1")
	ctx := deadline(t, 20*time.Second)
	c.streamRespond("org/ns/echo", "r")
	c.subscribe("org/ns/silent")
	st, err := c.RequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &nodev1.RequestBatch{Requests: []*nodev1.RequestRequest{
		{Id: 1, Name: nameOf(t, "org/ns/nobody"), Payload: []byte("x"), TimeoutMs: 60000},
		{Id: 2, Name: nameOf(t, "org/ns/echo"), Payload: []byte(strings.Repeat("x", 1001))},
		{Id: 3, Name: &nodev1.Name{Org: "org"}, Payload: []byte("x")},
		{Id: 4, Name: nameOf(t, "org/ns/silent"), Payload: []byte("x"), TimeoutMs: 300},
		{Id: 5, Name: nameOf(t, "org/ns/echo"), Payload: []byte("five")},
	}}
	if err := st.Send(b); err != nil {
		t.Fatal(err)
	}
	got := recvAnswers(t, st, 5)
	check := func(id uint64, code codes.Code, msg string) {
		t.Helper()
		a := got[id]
		if codes.Code(a.GetCode()) != code || !strings.Contains(a.GetError(), msg) {
			t.Errorf("request %d: %v %q, want %v containing %q", id, codes.Code(a.GetCode()), a.GetError(), code, msg)
		}
	}
	check(1, codes.Unavailable, "no responders for org/ns/nobody")
	check(2, codes.InvalidArgument, "payload is 1001 bytes; the limit is 1000 bytes")
	check(3, codes.InvalidArgument, "bad name")
	check(4, codes.DeadlineExceeded, "no answer to a request to org/ns/silent within 300ms")
	if a := got[5]; a.GetCode() != 0 || string(a.GetPayload()) != "r:five" {
		t.Errorf("request 5: %v, want the answer r:five", a)
	}
	// The stream is still up.
	if err := st.Send(&nodev1.RequestBatch{Requests: []*nodev1.RequestRequest{{Id: 6, Name: nameOf(t, "org/ns/echo"), Payload: []byte("six")}}}); err != nil {
		t.Fatal(err)
	}
	if a := recvAnswers(t, st, 1)[6]; a.GetCode() != 0 || string(a.GetPayload()) != "r:six" {
		t.Errorf("request 6 after the failures: %v, want the answer r:six", a)
	}
}

// TestRespondStreamRefusals: over one RespondStream, an answer to an unknown request
// and an oversized answer are reported, each naming its request, while an answer to
// a waiting request among them gets through; the last response has the totals.
func TestRespondStreamRefusals(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: "links: []\n", Node: func(c *node.Config) { c.MaxMessageBytes = 1000 }}, 1, "a")
	c := clientOf(t, f, "a/n1")
	ctx := deadline(t, 20*time.Second)
	s := c.subscribe("org/ns/echo")
	answer := make(chan error, 1)
	go func() {
		r, err := c.request(ctx, "org/ns/echo", "q", 10*time.Second)
		if err == nil && string(r.GetPayload()) != "answer" {
			err = fmt.Errorf("answered %q, want answer", r.GetPayload())
		}
		answer <- err
	}()
	var token string
	for token == "" {
		m, err := s.next(ctx)
		if err != nil {
			t.Fatalf("the request never came: %v", err)
		}
		token = m.GetReplyTo()
	}
	st, err := c.RespondStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&nodev1.RespondBatch{Answers: []*nodev1.RespondRequest{
		{ReplyTo: "a/n1#12345", Payload: []byte("x")},
		{ReplyTo: token, Payload: []byte(strings.Repeat("x", 1001))},
		{ReplyTo: token, Payload: []byte("answer")},
	}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	fs := r.GetFailures()
	if len(fs) != 2 ||
		fs[0].GetReplyTo() != "a/n1#12345" || codes.Code(fs[0].GetCode()) != codes.NotFound || !strings.Contains(fs[0].GetError(), `request "a/n1#12345" is not known`) ||
		fs[1].GetReplyTo() != token || codes.Code(fs[1].GetCode()) != codes.InvalidArgument || !strings.Contains(fs[1].GetError(), "the limit is 1000 bytes") {
		t.Fatalf("failures %v, want the unknown request (NOT_FOUND) and the oversized answer (INVALID_ARGUMENT naming the limit)", fs)
	}
	select {
	case err := <-answer:
		if err != nil {
			t.Fatalf("the request answered among the refusals: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the request was not answered before the test's deadline")
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil || !r.GetFinal() || r.GetAnswered() != 1 || r.GetRefused() != 2 {
		t.Fatalf("last response %v, %v; want final, 1 answered, 2 refused", r, err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last response: %v, want the stream's end", err)
	}
}

// TestRequesterAcrossLink: many goroutines share one Requester (one RequestStream)
// across a link; each gets its own answers, and a failure is a status error.
func TestRequesterAcrossLink(t *testing.T) {
	f := startFabric(t, pair, 1, "a", "b")
	clientOf(t, f, "b/n1").streamRespond("org/ns/echo", "b")
	req := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitAnswered(t, ctx, req, "org/ns/echo")
	r, err := node.NewRequester(ctx, req.NodeServiceClient)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	name := nameOf(t, "org/ns/echo")
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				p := fmt.Sprintf("%d.%d", g, i)
				a, err := r.Request(ctx, &nodev1.RequestRequest{Name: name, Payload: []byte(p), TimeoutMs: 10000})
				if err == nil && string(a.GetPayload()) != "b:"+p {
					err = fmt.Errorf("request %s answered %q", p, a.GetPayload())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, err = r.Request(ctx, &nodev1.RequestRequest{Name: nameOf(t, "org/ns/nobody"), Payload: []byte("x")})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("request nobody answers: %v, want UNAVAILABLE", err)
	}
	if _, err := r.Request(ctx, &nodev1.RequestRequest{Name: name, Payload: []byte("after")}); err != nil {
		t.Fatalf("request after a failure: %v", err)
	}
}

// TestRequestStreamCancelAbandons: a client that cancels its RequestStream abandons
// the requests in flight on it: the node forgets them (counted as timed out), and a
// late answer to one is refused as an answer to an unknown request.
func TestRequestStreamCancelAbandons(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: "links: []\n", Node: func(c *node.Config) { c.HealthListen = "127.0.0.1:0" }}, 1, "a")
	c := clientOf(t, f, "a/n1")
	ctx := deadline(t, 20*time.Second)
	silent := c.subscribe("org/ns/silent")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.RequestStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&nodev1.RequestBatch{Requests: []*nodev1.RequestRequest{{Id: 1, Name: nameOf(t, "org/ns/silent"), Payload: []byte("x"), TimeoutMs: 60000}}}); err != nil {
		t.Fatal(err)
	}
	var token string
	for token == "" {
		m, err := silent.next(ctx)
		if err != nil {
			t.Fatalf("the request never came: %v", err)
		}
		token = m.GetReplyTo()
	}
	cancel()
	addr := f.Node("a/n1").HealthAddr()
	for series(t, addr, "switchboard_node_requests_total")[`outcome="timeout"`] != 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("the abandoned request was not counted: %v", series(t, addr, "switchboard_node_requests_total"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = c.Respond(ctx, &nodev1.RespondRequest{ReplyTo: token, Payload: []byte("late")})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("late answer to an abandoned request: %v, want NOT_FOUND", err)
	}
}
