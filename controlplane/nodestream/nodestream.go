// Package nodestream is the control plane's node command handler
// (docs/controlplane.md, "The data-plane side"): it keeps the control
// stream of every connected data-plane node, sends commands on it, and matches each
// response to its request by message id.
//
// A request waits at most the handler's timeout (90 s by default), then fails with a
// TimeoutError. When a node's stream goes away every request still waiting on it
// fails at once with ErrStreamClosed, instead of blocking until the timeout
// ("In-flight waiters on disconnect"). The handler remembers which nodes have stopped
// answering; LogSilence logs a node's first timeout and its first answer after it.
//
// Every send has a deadline too (10 s by default, WithSendTimeout): a node that stops
// reading its stream fills the HTTP/2 flow-control window, after which a send would
// block for as long as the node stays silent — holding the stream's send lock, and
// with it every reconciler worker that wants to reach the node. A send that misses
// the deadline closes the stream instead (ErrSendTimeout): the node is evicted, and
// it reconnects and is reconciled afresh.
//
// A stream that is closed by the handler rather than by its owner — replaced by a
// newer stream of the same node (ErrReplaced) or evicted — closes Done; the owner (the
// southbound service) must then end the node's RPC with a status that says why, so the
// process on the other end learns it is no longer registered.
package nodestream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// DefaultTimeout is how long a request waits for its response.
const DefaultTimeout = 90 * time.Second

// DefaultSendTimeout bounds one send: waiting for the stream's turn plus writing the
// message into gRPC's flow-control window. A healthy node drains its window in
// milliseconds; ten seconds leaves room for a busy network and a GC pause without
// keeping reconcilers waiting on a node that has stopped reading.
const DefaultSendTimeout = 10 * time.Second

var (
	// ErrNotConnected is returned for a node without a stream.
	ErrNotConnected = errors.New("node not connected")
	// ErrStreamClosed is returned to requests whose node's stream went away.
	ErrStreamClosed = errors.New("node stream closed")
	// ErrTimeout is matched by the TimeoutError of a response that does not arrive
	// in time.
	ErrTimeout = errors.New("timed out waiting for the node's response")
	// ErrSendTimeout: a send missed the send deadline because the node is not reading
	// its stream; the stream is closed (errors wrapping it match ErrStreamClosed too).
	ErrSendTimeout = errors.New("send deadline exceeded: the node is not reading its stream")
	// ErrReplaced is the cause of a stream closed because a newer stream of the same
	// node registered.
	ErrReplaced = errors.New("replaced by a newer connection of the same node")
	// ErrRevoked is the cause of a stream closed because the node may no longer be
	// registered (its group's registration secret was removed).
	ErrRevoked = errors.New("registration revoked")
	// errRemoved is the cause of a stream its owner removed.
	errRemoved = errors.New("stream removed")
)

// SendFunc writes one message on a node's stream. The handler never calls it
// concurrently for one stream (gRPC streams forbid concurrent sends).
type SendFunc func(*controllerv1.ControlMessage) error

// Handler tracks node streams. The zero value is not usable; call New.
type Handler struct {
	timeout     time.Duration
	sendTimeout time.Duration
	quiet       *silences
	mu          sync.Mutex
	streams     map[string]*Stream
}

// Option configures a Handler.
type Option func(*Handler)

// WithSendTimeout sets the send deadline (DefaultSendTimeout if d <= 0).
func WithSendTimeout(d time.Duration) Option {
	return func(h *Handler) {
		if d > 0 {
			h.sendTimeout = d
		}
	}
}

// New returns a handler whose requests wait at most timeout (DefaultTimeout if 0).
func New(timeout time.Duration, opts ...Option) *Handler {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	h := &Handler{timeout: timeout, sendTimeout: DefaultSendTimeout, quiet: newSilences(), streams: map[string]*Stream{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Stream is one node's control stream.
type Stream struct {
	nodeID      string
	send        SendFunc
	sendTimeout time.Duration
	quiet       *silences
	// turn is the send lock as a channel, so waiting for it can time out; a send holds
	// it until SendFunc returns, even when its caller gave up, so that sends never
	// overlap (gRPC forbids concurrent sends on a stream).
	turn chan struct{}
	done chan struct{} // closed by close

	mu      sync.Mutex
	closed  bool
	cause   error
	waiters map[string]chan *controllerv1.ControlMessage
}

// Add registers the stream of a node and returns it. A stream the node had before —
// a reconnect racing the old stream's end, or a second process using the same node
// id — is closed first with ErrReplaced, failing its waiters.
func (h *Handler) Add(nodeID string, send SendFunc) *Stream {
	s := &Stream{nodeID: nodeID, send: send, sendTimeout: h.sendTimeout, quiet: h.quiet,
		turn: make(chan struct{}, 1), done: make(chan struct{}),
		waiters: map[string]chan *controllerv1.ControlMessage{}}
	h.mu.Lock()
	old := h.streams[nodeID]
	h.streams[nodeID] = s
	h.mu.Unlock()
	if old != nil {
		old.close(ErrReplaced)
	}
	return s
}

// Remove unregisters s if it is still the node's stream, and fails its waiters. It
// reports whether s was the node's current stream: when a newer stream replaced it,
// the node is still connected and the caller must not treat it as gone.
func (h *Handler) Remove(s *Stream) bool {
	h.mu.Lock()
	current := h.streams[s.nodeID] == s
	if current {
		delete(h.streams, s.nodeID)
	}
	h.mu.Unlock()
	s.close(errRemoved)
	return current
}

// Close closes the node's stream with cause, for its owner to end the node's RPC;
// it reports whether the node had a stream.
func (h *Handler) Close(nodeID string, cause error) bool {
	h.mu.Lock()
	s := h.streams[nodeID]
	h.mu.Unlock()
	if s == nil {
		return false
	}
	s.close(cause)
	return true
}

// Connected reports whether the node has a stream.
func (h *Handler) Connected(nodeID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams[nodeID] != nil
}

// Nodes returns the ids of every node with a stream.
func (h *Handler) Nodes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.streams))
	for id := range h.streams {
		out = append(out, id)
	}
	return out
}

func (h *Handler) stream(nodeID string) (*Stream, error) {
	h.mu.Lock()
	s := h.streams[nodeID]
	h.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotConnected, nodeID)
	}
	return s, nil
}

// Send writes msg to the node without waiting for a response. An empty message id is
// filled in.
func (h *Handler) Send(nodeID string, msg *controllerv1.ControlMessage) error {
	s, err := h.stream(nodeID)
	if err != nil {
		return err
	}
	if msg.GetMessageId() == "" {
		msg.MessageId = uuid.NewString()
	}
	return s.write(msg)
}

// Request sends msg to the node and waits for the message that names it in reply_to.
func (h *Handler) Request(ctx context.Context, nodeID string, msg *controllerv1.ControlMessage) (*controllerv1.ControlMessage, error) {
	s, err := h.stream(nodeID)
	if err != nil {
		return nil, err
	}
	return s.request(ctx, msg, h.timeout)
}

// Deliver hands a response from the node to the request waiting for it. It reports
// false when nobody waits for it (a late response after a timeout, or not a response).
// Any response, a late one too, shows that the node answers again.
func (s *Stream) Deliver(msg *controllerv1.ControlMessage) bool {
	id := msg.GetReplyTo()
	if id == "" {
		return false
	}
	s.quiet.answered(s.nodeID)
	s.mu.Lock()
	ch, ok := s.waiters[id]
	delete(s.waiters, id)
	s.mu.Unlock()
	if ok {
		ch <- msg // buffered: never blocks
	}
	return ok
}

// Done is closed when the stream is closed: removed by its owner, replaced by a newer
// stream of the node, or evicted for missing the send deadline. Err says which.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err is why the stream was closed (ErrReplaced, an error wrapping ErrSendTimeout, or
// the owner's removal); nil while it is open.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// NodeID is the node the stream belongs to.
func (s *Stream) NodeID() string { return s.nodeID }

// Send writes msg on this stream without waiting (the southbound loop's own replies).
func (s *Stream) Send(msg *controllerv1.ControlMessage) error {
	if msg.GetMessageId() == "" {
		msg.MessageId = uuid.NewString()
	}
	return s.write(msg)
}

func (s *Stream) request(ctx context.Context, msg *controllerv1.ControlMessage, timeout time.Duration) (*controllerv1.ControlMessage, error) {
	if msg.GetMessageId() == "" {
		msg.MessageId = uuid.NewString()
	}
	ch := make(chan *controllerv1.ControlMessage, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.closedErr()
	}
	s.waiters[msg.MessageId] = ch
	s.mu.Unlock()
	defer s.forget(msg.MessageId)

	sent := time.Now()
	if err := s.write(msg); err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, s.closedErr()
		}
		return resp, nil
	case <-timer.C:
		return nil, &TimeoutError{Node: s.nodeID, Waited: timeout, Since: s.quiet.timedOut(s.nodeID, sent, timeout)}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// write sends msg within the send deadline, which covers both waiting for the
// stream's turn and the send itself. A send that misses it evicts the node: the
// stream is closed, and the blocked SendFunc returns once the owner ends the RPC.
func (s *Stream) write(msg *controllerv1.ControlMessage) error {
	timer := time.NewTimer(s.sendTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		return s.closedErr()
	default:
	}
	select {
	case s.turn <- struct{}{}:
	case <-s.done:
		return s.closedErr()
	case <-timer.C:
		return s.evict()
	}
	if s.isClosed() {
		<-s.turn
		return s.closedErr()
	}
	sent := make(chan error, 1)
	// Owned by this stream's turn: it ends when SendFunc returns, which gRPC
	// guarantees once the RPC ends, and the eviction below makes the RPC end.
	go func() {
		err := s.send(msg)
		<-s.turn
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			return fmt.Errorf("send to node %s: %w", s.nodeID, err)
		}
		return nil
	case <-s.done:
		return s.closedErr()
	case <-timer.C:
		return s.evict()
	}
}

// evict closes the stream of a node that did not take a message within the send
// deadline and returns the error for the send that noticed.
func (s *Stream) evict() error {
	err := fmt.Errorf("%w: %w (node %s, waited %s)", ErrStreamClosed, ErrSendTimeout, s.nodeID, s.sendTimeout)
	s.close(err)
	return err
}

func (s *Stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// closedErr is the error for a send or request on a closed stream: ErrStreamClosed,
// and the cause when the handler closed it.
func (s *Stream) closedErr() error {
	cause := s.Err()
	switch {
	case cause == nil || cause == errRemoved:
		return fmt.Errorf("%w: %s", ErrStreamClosed, s.nodeID)
	case errors.Is(cause, ErrStreamClosed): // an eviction's error says it all
		return cause
	default:
		return fmt.Errorf("%w: %s: %w", ErrStreamClosed, s.nodeID, cause)
	}
}

func (s *Stream) forget(id string) {
	s.mu.Lock()
	delete(s.waiters, id)
	s.mu.Unlock()
}

// close fails every waiter at once (their channels close), refuses new requests and
// sends, and records the cause; the first close wins.
func (s *Stream) close(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed, s.cause = true, cause
	close(s.done)
	for id, ch := range s.waiters {
		close(ch)
		delete(s.waiters, id)
	}
}
