package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// held is what the registrar keeps alive for this client's session: registrations
// it answered "held" while the session's watch stream was open to it. Registering
// one of them again unchanged, while that same stream is open, is answered at once
// without a call (an agent's refresh costs nothing). When the stream ends, they are
// sent again on the next one, so that the replica it reaches (the same, or another
// when the first died) takes them over before the old one's hold runs out.
type held struct {
	session string
	mu      sync.Mutex
	// gen moves on at each stream's first message and at its end: odd while a
	// stream is open.
	gen uint64
	own map[endpoint.Key]heldWrite
}

type heldWrite struct {
	ep  endpoint.Endpoint
	gen uint64 // the stream it was held on; 0: none yet
}

func newHeld() *held {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &held{session: hex.EncodeToString(b[:]), own: map[endpoint.Key]heldWrite{}}
}

// opened and closed mark a stream's first message and its end.
func (h *held) opened() { h.move(1) }
func (h *held) closed() { h.move(0) }

func (h *held) move(odd uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen%2 != odd {
		h.gen++
	}
}

// current is the stream generation writes made now are held on, and whether a
// stream is open.
func (h *held) current() (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen, h.gen%2 == 1
}

// absorbed returns the ops to send: all but the registrations the registrar already
// holds as they are, on the open stream.
func (h *held) absorbed(ops []registry.Op) (send []registry.Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen%2 == 0 || len(h.own) == 0 {
		return ops
	}
	send = ops[:0:0]
	for _, op := range ops {
		if w, ok := h.own[op.Endpoint.Key()]; ok && op.Kind == registry.OpRegister && w.gen == h.gen && endpoint.Equal(w.ep, op.Endpoint) {
			continue
		}
		send = append(send, op)
	}
	return send
}

// wrote records a write the registrar accepted while generation gen was current:
// registrations it holds are held on gen if that stream is still the open one.
// Registrations with a TTL made while no stream was open (an agent's first writes
// may come before its stream's first message) are remembered as held on none
// (generation 0), so that the next stream to open hands them over at once rather
// than at the agent's next refresh. Anything else is forgotten: a registrar that
// does not hold what it was sent on an open stream is not sent it again.
func (h *held) wrote(ops []registry.Op, isHeld bool, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := isHeld && gen == h.gen && gen%2 == 1
	for _, op := range ops {
		k := op.Endpoint.Key()
		switch {
		case op.Kind == registry.OpRegister && keep:
			h.own[k] = heldWrite{ep: op.Endpoint, gen: gen}
		case op.Kind == registry.OpRegister && gen%2 == 0 && op.Endpoint.TTL.Duration() > 0:
			h.own[k] = heldWrite{ep: op.Endpoint}
		default:
			delete(h.own, k)
		}
	}
}

// stale returns the registrations not yet held on the open stream.
func (h *held) stale() []registry.Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []registry.Op
	for _, w := range h.own {
		if w.gen != h.gen {
			out = append(out, registry.Register(w.ep))
		}
	}
	return out
}

// rehold sends the registrations not held on a stream that just opened, so that
// the replica it reaches holds them; it retries until each is held there, the
// stream ends or the client closes. It takes the write lock for each attempt, as a
// re-send does, so that a newer write of the agent is never overtaken.
func (c *driver) rehold(ctx context.Context) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b := backoff.Backoff{Min: c.opts.BackoffMin, Max: c.opts.BackoffMax}
		for ctx.Err() == nil {
			n, err := c.reholdOnce(ctx)
			if err == nil {
				if n > 0 {
					c.log.Info("the registrar holds this client's entries again", "count", n)
				}
				return
			}
			c.log.Warn("handing held entries to the registrar failed; retrying", "err", err)
			b.Wait(ctx)
		}
	}()
}

// reholdOnce makes one attempt, and returns how many entries it sent.
func (c *driver) reholdOnce(ctx context.Context) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	gen, open := c.held.current()
	ops := c.held.stale()
	if !open || len(ops) == 0 {
		return 0, nil
	}
	for _, chunk := range requests(ops, func(op registry.Op) registry.Op { return op }) {
		_, isHeld, err := c.send(ctx, chunk)
		if err != nil {
			return 0, err
		}
		c.held.wrote(chunk, isHeld, gen)
	}
	return len(ops), nil
}
