package nodestream

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A node that stops answering is worth a warning the first time a request to it
// times out, not at every timeout: the reconcilers retry it with backoff, and each
// retry times out again. The handler keeps, per node, since when the node has not
// answered and the changes not logged yet; the requesters log those with their own
// loggers (LogSilence), so each change is logged once, by whichever asks first.

// TimeoutError is a request the node did not answer within the handler's timeout. It
// matches ErrTimeout.
type TimeoutError struct {
	Node   string
	Waited time.Duration
	// Since is when the node was sent the first request it has not answered: the
	// start of the silence this timeout belongs to.
	Since time.Time
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%v (%s, node %s)", ErrTimeout, e.Waited, e.Node)
}

func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// silenceEvent is a change not logged yet: the node's first timeout, or its first
// answer after one.
type silenceEvent struct {
	answered bool
	since    time.Time // the start of the silence
	at       time.Time // when the change happened
	waited   time.Duration
}

// silences is the handler's record of the nodes that do not answer. A node's entry
// outlives its stream: a node that reconnects without answering is still silent.
type silences struct {
	// entries counts the nodes in since and pending, so that the common case — every
	// node answers — costs each response and request an atomic load, not the lock.
	entries atomic.Int64

	mu      sync.Mutex
	since   map[string]time.Time
	pending map[string][]silenceEvent
}

func newSilences() *silences {
	return &silences{since: map[string]time.Time{}, pending: map[string][]silenceEvent{}}
}

// timedOut records that a request sent at sent timed out after waited, and returns
// the start of the node's silence.
func (s *silences) timedOut(node string, sent time.Time, waited time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, silent := s.since[node]
	if !silent {
		since = sent
		s.since[node] = since
		s.pending[node] = append(s.pending[node], silenceEvent{since: since, at: time.Now(), waited: waited})
		s.count()
	}
	return since
}

// answered records that the node sent a response, which ends its silence.
func (s *silences) answered(node string) {
	if s.entries.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	since, silent := s.since[node]
	if !silent {
		return
	}
	delete(s.since, node)
	s.pending[node] = append(s.pending[node], silenceEvent{answered: true, since: since, at: time.Now()})
	s.count()
}

func (s *silences) take(node string) []silenceEvent {
	if s.entries.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	events := s.pending[node]
	delete(s.pending, node)
	s.count()
	return events
}

// count updates entries; the caller holds mu.
func (s *silences) count() { s.entries.Store(int64(len(s.since) + len(s.pending))) }

// LogSilence logs with log what changed since the last call for the node: at warn
// level its first request timeout, at info level its first answer after that. Each
// change is logged once, whoever calls; a requester calls it after each request.
func (h *Handler) LogSilence(log *slog.Logger, nodeID string) {
	for _, e := range h.quiet.take(nodeID) {
		if e.answered {
			log.Info("node answers the control plane again", "node", nodeID,
				"silent_for", e.at.Sub(e.since).Round(time.Millisecond))
			continue
		}
		log.Warn("node does not answer the control plane: a request got no response in time; "+
			"requests are retried, and this is logged again only after the node has answered",
			"node", nodeID, "request_timeout", e.waited, "since", e.since)
	}
}
