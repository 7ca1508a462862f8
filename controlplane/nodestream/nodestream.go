// Package nodestream is the control plane's node command handler
// (spec/control-plane.md, "Components": Node Command Handler): it keeps the control
// stream of every connected data-plane node, sends commands on it, and matches each
// response to its request by message id.
//
// A request waits at most the handler's timeout (90 s by default). When a node's stream
// goes away every request still waiting on it fails at once with ErrStreamClosed,
// instead of blocking until the timeout ("In-flight waiters on disconnect").
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

var (
	// ErrNotConnected is returned for a node without a stream.
	ErrNotConnected = errors.New("node not connected")
	// ErrStreamClosed is returned to requests whose node's stream went away.
	ErrStreamClosed = errors.New("node stream closed")
	// ErrTimeout is returned when a response does not arrive in time.
	ErrTimeout = errors.New("timed out waiting for the node's response")
)

// SendFunc writes one message on a node's stream. The handler never calls it
// concurrently for one stream (gRPC streams forbid concurrent sends).
type SendFunc func(*controllerv1.ControlMessage) error

// Handler tracks node streams. The zero value is not usable; call New.
type Handler struct {
	timeout time.Duration
	mu      sync.Mutex
	streams map[string]*Stream
}

// New returns a handler whose requests wait at most timeout (DefaultTimeout if 0).
func New(timeout time.Duration) *Handler {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Handler{timeout: timeout, streams: map[string]*Stream{}}
}

// Stream is one node's control stream.
type Stream struct {
	nodeID string
	sendMu sync.Mutex
	send   SendFunc

	mu      sync.Mutex
	closed  bool
	waiters map[string]chan *controllerv1.ControlMessage
}

// Add registers the stream of a node and returns it. A stream the node had before (a
// reconnect racing the old stream's end) is closed first, failing its waiters.
func (h *Handler) Add(nodeID string, send SendFunc) *Stream {
	s := &Stream{nodeID: nodeID, send: send, waiters: map[string]chan *controllerv1.ControlMessage{}}
	h.mu.Lock()
	old := h.streams[nodeID]
	h.streams[nodeID] = s
	h.mu.Unlock()
	if old != nil {
		old.close()
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
	s.close()
	return current
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
func (s *Stream) Deliver(msg *controllerv1.ControlMessage) bool {
	id := msg.GetReplyTo()
	if id == "" {
		return false
	}
	s.mu.Lock()
	ch, ok := s.waiters[id]
	delete(s.waiters, id)
	s.mu.Unlock()
	if ok {
		ch <- msg // buffered: never blocks
	}
	return ok
}

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
		return nil, fmt.Errorf("%w: %s", ErrStreamClosed, s.nodeID)
	}
	s.waiters[msg.MessageId] = ch
	s.mu.Unlock()
	defer s.forget(msg.MessageId)

	if err := s.write(msg); err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrStreamClosed, s.nodeID)
		}
		return resp, nil
	case <-timer.C:
		return nil, fmt.Errorf("%w (%s, node %s)", ErrTimeout, timeout, s.nodeID)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Stream) write(msg *controllerv1.ControlMessage) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: %s", ErrStreamClosed, s.nodeID)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.send(msg); err != nil {
		return fmt.Errorf("send to node %s: %w", s.nodeID, err)
	}
	return nil
}

func (s *Stream) forget(id string) {
	s.mu.Lock()
	delete(s.waiters, id)
	s.mu.Unlock()
}

// close fails every waiter at once (their channels close) and refuses new requests.
func (s *Stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for id, ch := range s.waiters {
		close(ch)
		delete(s.waiters, id)
	}
}
