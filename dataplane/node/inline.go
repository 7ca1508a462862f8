package node

import (
	"sync"
	"sync/atomic"
)

// Writing inline. Each stream a node writes (a link's, a local subscriber's) has a
// writer goroutine that drains its queue and sends what gathered in one batch. When a
// copy comes alone (its batch, published or received, held only it), the stream has
// nothing queued and nobody is writing it, the goroutine that has the copy — a
// publisher's handler, a link's reader — writes it itself instead, on the framed
// transport over TCP, with a write that never waits (tryWriteFrame). So a message
// that crosses a link is not handed to a parked goroutine on either node: on a host
// whose processors are busy, each such hand-over is a wake-up that may come late.
// nats-server's reader writes its subscribers' sockets itself in the same way.
//
// The batching is unchanged under load: a copy of a batch of many, one read while more
// is waiting in its connection's read buffer (a burst: nats-server's reader, too,
// writes once per read, not once per message), or one that finds the queue not empty,
// is queued, and the writer sends the queue in one.

// alone reports whether a copy read from s in a batch of k may be written inline: it
// is the batch's only one, and nothing more is waiting to be read on s's connection.
func alone(k int, s any) bool {
	if k != 1 {
		return false
	}
	f, ok := s.(*framed)
	return !ok || f == nil || f.r.Buffered() == 0
}

// tryWriteMsg writes w as a data frame if it can without waiting (tryWriteFrame).
func (f *framed) tryWriteMsg(w wireMarshaler) bool {
	data := marshalWire(w)
	defer data.Free()
	return f.tryWriteFrame(data)
}

// inlineGate orders a stream's inline writes with its writer's: both write holding
// mu, and a copy may be written inline only when none is queued or in the writer's
// hands (queued), so that it cannot pass one.
type inlineGate struct {
	mu     sync.Mutex
	queued atomic.Int64 // copies in the queue, or taken from it and not yet written
	f      *framed      // under mu: the stream, when it can be written inline (nil: not)
}

// enter returns the stream with mu held when a copy may be written inline now, or
// nil.
func (g *inlineGate) enter() *framed {
	if g.queued.Load() != 0 || !g.mu.TryLock() {
		return nil
	}
	if g.f == nil || g.queued.Load() != 0 {
		g.mu.Unlock()
		return nil
	}
	return g.f
}

// set makes f (nil: none) the stream written inline; only a plain TCP framed
// connection is.
func (g *inlineGate) set(f *framed) {
	if f != nil && f.raw == nil {
		f = nil
	}
	g.mu.Lock()
	g.f = f
	g.mu.Unlock()
}

// clear stops inline writes to f, if it is the gate's stream.
func (g *inlineGate) clear(f *framed) {
	g.mu.Lock()
	if g.f == f {
		g.f = nil
	}
	g.mu.Unlock()
}
