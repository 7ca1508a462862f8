package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/registry"
)

// How long a removal lives.
//
// nats-server's crash recovery can bring back a message that the one-message-per-
// subject limit (or a rollup) had removed: it stays hidden only while a newer message
// on its subject exists. A removal therefore has to live at least as long as what it
// supersedes would have lived, or a crash after the removal expires brings the entry
// back (docs/backends.md, "Removals and server crashes"). The removal is sized from
// the subject's current message, which it replaces:
//
//	current message          removal's Nats-TTL
//	none                     the marker TTL
//	Nats-TTL: <d>            max(d, marker TTL)
//	no Nats-TTL              none: the stream's MaxAge expires both (0 keeps both)
//	Nats-TTL: never          never
//
// A removal over a removal keeps the longer of the two. The removal is published only
// if the subject still holds what was read (Nats-Expected-Last-Subject-Sequence), so
// a registration that lands in between is never covered by a removal sized for
// something else; on such a conflict the removal is sized again.

// lifetime is how long a message lives in the stream, as its Nats-TTL header says.
// The zero value is "as long as the stream keeps messages" (no header, MaxAge).
type lifetime struct {
	never bool
	ttl   time.Duration // > 0: the message's own TTL
}

// longer reports whether a outlives b in any stream. A TTL never outlives "no TTL":
// MaxAge caps TTLs, and MaxAge 0 keeps messages without one for ever.
func (a lifetime) longer(b lifetime) bool {
	switch {
	case a.never || b.never:
		return a.never && !b.never
	case a.ttl == 0 || b.ttl == 0:
		return a.ttl == 0 && b.ttl != 0
	}
	return a.ttl > b.ttl
}

// header is the Nats-TTL value; empty means send none.
func (a lifetime) header() string {
	switch {
	case a.never:
		return "never"
	case a.ttl > 0:
		return a.ttl.String()
	}
	return ""
}

// lifetimeOf reads a stored message's Nats-TTL the way the server does ("never", a Go
// duration of at least a second cut down to whole seconds, or whole seconds). A value the server would not have stored counts as
// never: a removal sized too long costs a little space, one sized too short can bring
// an entry back.
func lifetimeOf(h nats.Header) lifetime {
	v := strings.TrimSpace(h.Get(jetstream.MsgTTLHeader))
	switch {
	case v == "":
		return lifetime{}
	case strings.EqualFold(v, "never"):
		return lifetime{never: true}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= time.Second {
		return lifetime{ttl: d.Truncate(time.Second)}
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
		return lifetime{ttl: time.Duration(s) * time.Second}
	}
	return lifetime{never: true}
}

// removalPlan is what the removal of one subject needs: how long it lives and the
// subject sequence it expects to replace (0: an empty subject).
type removalPlan struct {
	life    lifetime
	lastSeq uint64
	live    bool // the subject holds an entry, not a removal or nothing
	// owner is the hold the entry names (HoldHeader), if any: a held Unregister
	// removes it only while it is its own.
	owner registry.HoldID
	err   error
}

// maxSizingRequests bounds the concurrent reads one Apply makes to size its removals.
const maxSizingRequests = 32

// planRemovals reads the current message of every unregistered subject of ops and
// sizes its removal; plans[i] is set for the unregister ops only.
func (r *driver) planRemovals(ctx context.Context, ops []registry.Op) []*removalPlan {
	plans := make([]*removalPlan, len(ops))
	sem := make(chan struct{}, maxSizingRequests)
	var wg sync.WaitGroup
	for i, op := range ops {
		if op.Kind != registry.OpUnregister {
			continue
		}
		plans[i] = &removalPlan{}
		sem <- struct{}{}
		wg.Add(1)
		go func(p *removalPlan, subject string) {
			defer func() { <-sem; wg.Done() }()
			*p = r.planRemoval(ctx, subject)
		}(plans[i], r.subj.For(op.Endpoint.Key()))
	}
	wg.Wait()
	return plans
}

func (r *driver) planRemoval(ctx context.Context, subject string) removalPlan {
	marker := lifetime{ttl: r.cfg.MarkerTTL}
	m, err := r.lastMsg(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return removalPlan{life: marker}
	case err != nil:
		return removalPlan{err: fmt.Errorf("read %s to size its removal: %w", subject, err)}
	}
	return r.sizeRemoval(m.header, m.seq)
}

// sizeRemoval is the plan of a removal replacing the message with headers h at
// subject sequence seq.
func (r *driver) sizeRemoval(h nats.Header, seq uint64) removalPlan {
	life := lifetimeOf(h)
	if marker := (lifetime{ttl: r.cfg.MarkerTTL}); marker.longer(life) {
		life = marker
	}
	owner, _ := ownerOf(h)
	return removalPlan{life: life, lastSeq: seq, live: !isRemoval(h), owner: owner}
}

// heldBy reports whether the subject holds a live entry under hold id.
func (p *removalPlan) heldBy(id registry.HoldID) bool { return p.live && p.owner == id }

type storedMsg struct {
	seq    uint64
	header nats.Header
}

// lastMsg reads subject's last message from the stream leader. It asks the stream API
// rather than direct get, so it needs no AllowDirect and never reads a replica that
// trails the leader.
func (r *driver) lastMsg(ctx context.Context, subject string) (storedMsg, error) {
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	reply, err := r.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET."+r.cfg.Name, req)
	if err != nil {
		return storedMsg{}, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq     uint64 `json:"seq"`
			Headers []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return storedMsg{}, fmt.Errorf("message get response: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return storedMsg{}, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return storedMsg{}, resp.Error
	case resp.Message == nil:
		return storedMsg{}, jetstream.ErrInvalidJetStreamResponse
	}
	m := storedMsg{seq: resp.Message.Seq}
	if len(resp.Message.Headers) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(resp.Message.Headers); err != nil {
			return storedMsg{}, fmt.Errorf("message %d headers: %w", m.seq, err)
		}
	}
	return m, nil
}

// isWrongLastSeq reports whether a publish failed because the subject changed after
// its removal was sized. Replicated streams report it with a code of its own.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
