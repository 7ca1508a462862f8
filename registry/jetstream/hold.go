package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A hold is one liveness subject, <prefix>._hold.<id>, kept alive for one writer (a
// registrar replica) by a message with a Nats-TTL of the hold's ttl, published again
// every ttl/3. The entries it registers under the hold name it in HoldHeader and
// carry no Nats-TTL: they cost one write each, none per refresh, and the stream's
// MaxAge is their own long expiry (HoldRefresh), for readers that know nothing of
// holds. When the liveness message expires, the server's delete marker tells every
// holding driver's reaper (reaper.go), which removes the entries that name it. See
// registry.Holder.

// HoldHeader names, on an entry registered under a hold, the hold whose liveness
// keeps it (its ID, also the last token of the hold's liveness subject).
const HoldHeader = "Switchboard-Hold"

// holdToken is the token between the prefix and a hold's ID in its liveness subject.
// A cluster name starts with a letter, so no entry subject has it there, and a
// liveness subject has two tokens after the prefix where an entry has five: entry
// filters never match it and full reads skip it (Subjects.entryShaped).
const holdToken = "_hold"

// holdIDLen is the length of a hold ID: 128 random bits in lower-case hex, so that
// holds of every replica, process and restart are told apart without coordination.
const holdIDLen = 32

// hold is one liveness subject this driver keeps.
type hold struct {
	ttl     time.Duration
	subject string
	ended   atomic.Int64 // when its context ended (Unix nanoseconds); 0 while kept
}

// holds maps each HoldID this driver gave out to its hold.
type holds struct {
	mu sync.Mutex
	m  map[registry.HoldID]*hold
}

// Hold publishes a new liveness subject (failing if the first publish takes longer
// than ttl) and keeps it alive until ctx ends or the driver closes, under the same ID
// through failures of any length. Nothing deletes it: when ctx ends, it and its
// entries live up to ttl more, for their agents to re-home. The first hold starts
// the driver's reaper.
func (r *driver) Hold(ctx context.Context, ttl time.Duration) (registry.HoldID, error) {
	id, err := newHoldID()
	if err != nil {
		return "", err
	}
	h := &hold{ttl: ttl, subject: r.subj.liveness(id)}
	pctx, cancel := context.WithTimeout(ctx, ttl) // a hold not made within its ttl is no use
	err = r.renew(pctx, id, h)
	cancel()
	if err != nil {
		return "", unavailable(fmt.Errorf("hold: publish liveness on %s: %w", h.subject, err))
	}
	r.holds.mu.Lock()
	if r.holds.m == nil {
		r.holds.m = map[registry.HoldID]*hold{}
	}
	r.holds.m[id] = h
	r.holds.mu.Unlock()
	r.startReaper()
	r.tasks.Add(1)
	go r.keepHold(ctx, id, h)
	return id, nil
}

func newHoldID() (registry.HoldID, error) {
	var b [holdIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("hold: random ID: %w", err)
	}
	return registry.HoldID(hex.EncodeToString(b[:])), nil
}

// renew publishes the hold's liveness message, which replaces the last one.
func (r *driver) renew(ctx context.Context, id registry.HoldID, h *hold) error {
	secs := int64((h.ttl + time.Second - 1) / time.Second) // Nats-TTL has whole seconds
	m := &nats.Msg{Subject: h.subject, Header: nats.Header{
		jetstream.MsgRollup:    {jetstream.MsgRollupSubject},
		jetstream.MsgTTLHeader: {strconv.FormatInt(secs, 10) + "s"},
	}}
	// The body says what the subject is to an operator browsing the stream; readers
	// go by the subject and headers only.
	m.Data = fmt.Appendf(nil, `{"hold":%q,"ttl":"%ds"}`, id, secs)
	pctx, cancel := context.WithTimeout(ctx, h.ttl)
	defer cancel()
	a, err := r.js.PublishMsg(pctx, m)
	if err == nil {
		r.noteWritten(a.Sequence)
	}
	return err
}

// keepHold publishes the hold's liveness every ttl/3 until ctx ends or the driver
// closes. A failed renewal is retried sooner, with backoff; past ttl the liveness
// has expired and its entries are being reaped, but the hold goes on under the same
// ID (as etcd's are granted again), and its writer registers them again.
//
// The hold stays known after ctx ends, for ttl: writes still under way (a registrar
// persisting its last writes at shutdown) may use it while its liveness lasts.
func (r *driver) keepHold(ctx context.Context, id registry.HoldID, h *hold) {
	defer r.tasks.Done()
	defer h.ended.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.life, cancel)
	defer stop()
	every := h.ttl / 3
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: every}
	lastOK, lapsed := time.Now(), false
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.renew(ctx, id, h)
		switch {
		case err == nil:
			if lapsed {
				r.log.Warn("hold renewed after its liveness lapsed: the entries it held were reaped", "hold", id)
			}
			lastOK, lapsed = time.Now(), false
			b.Reset()
			t.Reset(every)
			continue
		case ctx.Err() != nil:
			return
		case !lapsed && time.Since(lastOK) > h.ttl:
			lapsed = true
			r.log.Warn("hold liveness lapsed; renewing under the same ID", "hold", id, "error", err)
		default:
			r.log.Debug("hold renewal failed; retrying", "hold", id, "error", err)
		}
		t.Reset(b.Next())
	}
}

// checkHolds fails a batch with an op under a hold this driver did not give out, or
// whose context ended longer than its ttl ago (its liveness is gone).
func (r *driver) checkHolds(ops []registry.Op) error {
	for _, op := range ops {
		if op.Hold == "" {
			continue
		}
		r.holds.mu.Lock()
		h := r.holds.m[op.Hold]
		r.holds.mu.Unlock()
		if h == nil {
			return fmt.Errorf("jetstream: %w: unknown hold %q", registry.ErrNoHold, op.Hold)
		}
		if end := h.ended.Load(); end != 0 && time.Since(time.Unix(0, end)) > h.ttl {
			return fmt.Errorf("jetstream: %w: hold %q ended", registry.ErrNoHold, op.Hold)
		}
	}
	return nil
}

// HoldRefresh is how often a held entry must be registered again: seven eighths of
// the stream's MaxAge as opened (3 h to spare at the default 24 h), so that it never
// expires while its hold lives; 0 when the stream has no MaxAge, and held entries
// never expire on their own.
func (r *driver) HoldRefresh() time.Duration { return r.maxAge * 7 / 8 }

var (
	_ registry.Holder        = (*driver)(nil)
	_ registry.HoldRefresher = (*driver)(nil)
)

// liveness is the subject of hold id's liveness messages.
func (s Subjects) liveness(id registry.HoldID) string {
	return s.prefix + "." + holdToken + "." + string(id)
}

// livenessAll is the filter of every hold's liveness subject.
func (s Subjects) livenessAll() string { return s.prefix + "." + holdToken + ".*" }

// parseHoldID reads a hold ID as this backend makes them (an owner header, the last
// token of a liveness subject); anything else names no hold.
func parseHoldID(v string) (registry.HoldID, bool) {
	if len(v) != holdIDLen {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return registry.HoldID(v), true
}

// ownerOf is the hold an entry's headers name, if any.
func ownerOf(h nats.Header) (registry.HoldID, bool) {
	if len(h) == 0 {
		return "", false
	}
	return parseHoldID(h.Get(HoldHeader))
}

// holdOf is the hold whose liveness subject this is, if it is one.
func (s Subjects) holdOf(subject string) (registry.HoldID, bool) {
	p := len(s.prefix)
	if len(subject) != p+len(holdToken)+2+holdIDLen || subject[:p] != s.prefix ||
		subject[p] != '.' || subject[p+1:p+1+len(holdToken)] != holdToken || subject[p+1+len(holdToken)] != '.' {
		return "", false
	}
	return parseHoldID(subject[p+len(holdToken)+2:])
}
