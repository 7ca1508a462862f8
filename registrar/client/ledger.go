package client

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// ledger is this client's own writes that the registrar has not yet reported
// persisted: shown over base until the stream reflects them (overlaid), sent again
// if the replica that accepted them dies first, forgotten once the persisted
// frontier passes them.
type ledger struct {
	own map[endpoint.Key]*ownWrite
	// order lists overlaid keys in write order, so overlays retire as the stream's
	// version passes theirs; unconfirmed lists remembered writes in write order, so
	// they are forgotten from the front as the persisted frontier passes them.
	order       []endpoint.Key
	unconfirmed []ownRef
	persisted   token.Version // the last persisted frontier the stream reported
}

// ownWrite is the last write this client made to a key, remembered until the
// registrar reports it persisted, so that it can be sent again if the replica that
// accepted it dies first.
type ownWrite struct {
	op      registry.Op
	at      token.Version // the registrar version the write is visible at
	when    time.Time
	overlay bool               // shown instead of base until the stream passes at
	trace   *trace.SpanContext // the write's trace context, nil if it is not traced (tracing.go)
}

type ownRef struct {
	key endpoint.Key
	w   *ownWrite
}

// wrote records writes the registrar accepted at version v and shows them at once.
func (c *cache) wrote(ops []registry.Op, v token.Version) { c.wroteTraced(ops, v, nil) }

// wroteTraced is wrote for writes of a traced call: each remembers tr.
func (c *cache) wroteTraced(ops []registry.Op, v token.Version, tr *trace.SpanContext) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, op := range ops {
		k := op.Endpoint.Key()
		if c.persisted.Epoch == v.Epoch && c.persisted.Seq >= v.Seq {
			// The stream already said so: the write is persisted (only a message
			// sent after a write can cover its version), and the view shows it.
			delete(c.own, k)
			c.refresh(k)
			continue
		}
		w := &ownWrite{op: op, at: v, when: now, overlay: !c.passed(v), trace: tr}
		c.own[k] = w
		c.unconfirmed = append(c.unconfirmed, ownRef{key: k, w: w})
		if w.overlay {
			c.order = append(c.order, k)
		}
		c.refresh(k)
	}
	c.compactUnconfirmed()
}

// compactUnconfirmed drops the references to superseded writes once they outnumber
// the live ones: an agent that refreshes the same keys for as long as nothing
// confirms them keeps a list the size of its keys, not of its writes.
func (c *cache) compactUnconfirmed() {
	if len(c.unconfirmed) <= 2*len(c.own)+64 {
		return
	}
	kept := c.unconfirmed[:0]
	for _, r := range c.unconfirmed {
		if c.own[r.key] == r.w {
			kept = append(kept, r)
		}
	}
	clear(c.unconfirmed[len(kept):])
	c.unconfirmed = kept
}

// passed reports whether the stream has applied version v of the same replica.
func (c *cache) passed(v token.Version) bool {
	return c.at.Epoch == v.Epoch && c.at.Seq >= v.Seq
}

// retire stops overlaying the writes the stream has caught up with.
func (c *cache) retire() {
	kept := c.order[:0]
	for _, k := range c.order {
		w := c.own[k]
		if w == nil || !w.overlay {
			continue
		}
		// A write made through another replica (during a failover) cannot be
		// compared by version; it retires once the stream shows it.
		if c.passed(w.at) || (w.at.Epoch != c.at.Epoch && c.agrees(k, w)) {
			w.overlay = false
			c.refresh(k)
			continue
		}
		kept = append(kept, k)
	}
	clear(c.order[len(kept):])
	c.order = kept
}

// confirm forgets the writes the registrar reports persisted. A frontier of 0 says
// that nothing is.
func (c *cache) confirm(p token.Version) {
	if p.Seq == 0 {
		return
	}
	c.persisted = p
	n := 0
	for _, r := range c.unconfirmed {
		w := c.own[r.key]
		if w != r.w { // superseded by a later write, or forgotten
			n++
			continue
		}
		if w.overlay || w.at.Epoch != p.Epoch || w.at.Seq > p.Seq {
			break
		}
		delete(c.own, r.key)
		n++
	}
	clear(c.unconfirmed[:n])
	c.unconfirmed = c.unconfirmed[n:]
	if len(c.unconfirmed) == 0 {
		c.unconfirmed = nil
	}
}

// agrees reports whether the stream's state of k is what the write w made it.
func (c *cache) agrees(k endpoint.Key, w *ownWrite) bool {
	cur, ok := c.base[k]
	if w.op.Kind == registry.OpUnregister {
		return !ok
	}
	return ok && endpoint.Equal(cur, w.op.Endpoint)
}

// reconcileOwn compares this client's unconfirmed writes with a new snapshot.
// Writes the snapshot agrees with stop being overlaid. After a move to another
// replica or epoch, writes made through an earlier one that the snapshot lacks are
// kept overlaid and returned for re-sending; registrations past their TTL are
// forgotten.
func (c *cache) reconcileOwn(newEpoch bool) []ownRef {
	var resend []ownRef
	now := c.now()
	for k, w := range c.own {
		switch {
		case expired(w, now):
			delete(c.own, k)
			c.refresh(k)
		case c.agrees(k, w) && w.at.Epoch != c.at.Epoch:
			// The new replica has it, and can only have learnt it from the
			// backend: it is persisted.
			delete(c.own, k)
		case c.agrees(k, w):
			w.overlay = false
		case w.at.Epoch == c.at.Epoch:
			// Written through this very replica: the stream brings it in order.
		case newEpoch:
			if !w.overlay {
				w.overlay = true
				c.order = append(c.order, k)
			}
			w.at = unsent(c.at.Epoch)
			resend = append(resend, ownRef{key: k, w: w})
		}
	}
	return resend
}

// expired reports whether a remembered registration has outlived its TTL, so that
// sending it again would resurrect an endpoint its owner let lapse.
func expired(w *ownWrite, now time.Time) bool {
	ttl := w.op.Endpoint.TTL.Duration()
	return w.op.Kind == registry.OpRegister && ttl > 0 && now.Sub(w.when) > ttl
}

// unsent is the version of a write waiting to be sent again: no stream passes it.
func unsent(epoch uint64) token.Version { return token.Version{Epoch: epoch, Seq: ^uint64(0)} }

// stillLost returns, of the writes to re-send, those that are still the last write
// to their key and not yet re-sent. A write the agent made since supersedes a lost
// one: sending the lost one after it would undo it.
func (c *cache) stillLost(refs []ownRef) []ownRef {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var live []ownRef
	for _, r := range refs {
		if c.own[r.key] == r.w && r.w.at == unsent(r.w.at.Epoch) {
			live = append(live, r)
		}
	}
	return live
}

// resent records that re-sent writes are visible at v.
func (c *cache) resent(refs []ownRef, v token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range refs {
		if c.own[r.key] == r.w {
			r.w.at = v
		}
	}
	c.retire()
}
