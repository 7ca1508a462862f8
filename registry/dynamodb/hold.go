package dynamodb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A hold is one heartbeat item kept fresh for one writer (a registrar replica): the
// entries it registers under the hold name the heartbeat as their owner instead of
// expiring, so they cost one write each and none per refresh, and readers drop them
// once the heartbeat has expired. See registry.Holder and doc.go ("Holds").
//
// The owner an entry names is one incarnation of the hold (holdID.generation), not
// the hold: when a heartbeat lapsed (the writer could not renew it within ttl) its
// entries are gone for readers, and renewing it in place would bring them back. The
// hold starts a new incarnation under the same ID instead, and its writer registers
// the entries again, as after an etcd lease was lost.
type hold struct {
	id  registry.HoldID
	ttl time.Duration
	gen atomic.Int64 // the current incarnation; read by Apply, moved by keepHold only
	// written says whether the current incarnation's heartbeat has been written once,
	// so that a renewal can require it to be still alive; lapsed, that it expired and
	// the next incarnation's is still to be written. Both are keepHold's alone.
	written, lapsed bool
	expMs           atomic.Int64 // expiry of the last heartbeat written, epoch ms
}

// owner is the value held entries of the current incarnation carry in attrOwner.
func (h *hold) owner() string { return ownerName(h.id, h.gen.Load()) }

func ownerName(id registry.HoldID, gen int64) string {
	return string(id) + "." + strconv.FormatInt(gen, 10)
}

// holds maps each HoldID this driver gave out, until its heartbeat expires after its
// context ended, to its state.
type holds struct {
	mu sync.Mutex
	m  map[registry.HoldID]*hold
}

func (hs *holds) get(id registry.HoldID) *hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.m[id]
}

func (hs *holds) put(h *hold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m == nil {
		hs.m = map[registry.HoldID]*hold{}
	}
	hs.m[h.id] = h
}

func (hs *holds) drop(id registry.HoldID) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.m, id)
}

// Hold writes a heartbeat item for a new hold (failing if that does not succeed
// within ttl) and renews it every ttl/3 until ctx ends or the registry closes.
// Nothing deletes it: when ctx ends its entries stay visible until it expires, for
// their agents to re-home.
func (r *driver) Hold(ctx context.Context, ttl time.Duration) (registry.HoldID, error) {
	id, err := newHoldID()
	if err != nil {
		return "", err
	}
	h := &hold{id: id, ttl: ttl}
	h.gen.Store(1)
	fctx, cancel := context.WithTimeout(ctx, ttl) // a hold not made within its ttl is no use
	err = r.beatUntilDone(fctx, h)
	cancel()
	if err != nil {
		return "", fmt.Errorf("dynamodb: hold: first heartbeat on table %s within %s: %w", r.table, ttl, err)
	}
	r.holds.put(h)
	r.startReaper()
	// The renewals stop with ctx or with Close, whichever comes first.
	kctx, stop := context.WithCancel(ctx)
	unhook := context.AfterFunc(r.stop, stop)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer stop()
		defer unhook()
		r.keepHold(kctx, h)
	}()
	r.log.Info("dynamodb: holding", "table", r.table, "hold", id, "ttl", ttl)
	return id, nil
}

func newHoldID() (registry.HoldID, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dynamodb: hold id: %w", err)
	}
	return registry.HoldID("dynamodb-hold-" + hex.EncodeToString(b[:])), nil
}

// keepHold renews the heartbeat every ttl/3, retrying failures with backoff, until
// ctx ends; then it keeps the hold known until its heartbeat expires, so that writes
// still under way when ctx ended (a registrar persisting its last writes) may use it.
func (r *driver) keepHold(ctx context.Context, h *hold) {
	for backoff.Sleep(ctx, h.ttl/3) {
		if r.beatUntilDone(ctx, h) != nil {
			break
		}
	}
	left := time.Until(time.UnixMilli(h.expMs.Load()))
	if backoff.Sleep(r.stop, left) {
		r.holds.drop(h.id)
	}
}

// beatUntilDone writes the heartbeat, retrying with backoff until it succeeds or ctx
// ends (the SDK has already retried each request).
func (r *driver) beatUntilDone(ctx context.Context, h *hold) error {
	b := backoff.Backoff{Min: 50 * time.Millisecond, Max: max(h.ttl/6, 50*time.Millisecond)}
	for {
		err := r.beat(ctx, h)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		r.log.Warn("dynamodb: hold heartbeat failed; retrying", "table", r.table, "hold", h.id, "err", err)
		if !b.Wait(ctx) {
			return err
		}
	}
}

// beat writes the current incarnation's heartbeat once. A renewal must find the
// heartbeat still alive; if it lapsed, the hold moves to a new incarnation, whose
// first heartbeat is written at once. Ops use the new owner only once its heartbeat
// exists: an entry is never written under an owner readers would find missing.
func (r *driver) beat(ctx context.Context, h *hold) error {
	if !h.lapsed {
		err := r.putHeartbeat(ctx, h, h.gen.Load(), h.written)
		var lapsed *types.ConditionalCheckFailedException
		if !errors.As(err, &lapsed) {
			return err
		}
		h.lapsed = true
		r.log.Warn("dynamodb: hold heartbeat had expired; its entries are gone for readers and must be registered again",
			"table", r.table, "hold", h.id, "expired", h.owner())
	}
	gen := h.gen.Load() + 1
	if err := r.putHeartbeat(ctx, h, gen, false); err != nil {
		return err
	}
	h.gen.Store(gen)
	h.lapsed = false
	r.log.Info("dynamodb: hold started over", "table", r.table, "hold", h.id, "owner", h.owner())
	return nil
}

// putHeartbeat writes incarnation gen's heartbeat with a new expiry, requiring, for a
// renewal, that the one it replaces has not expired.
func (r *driver) putHeartbeat(ctx context.Context, h *hold, gen int64, renew bool) error {
	now := r.now()
	expMs := now.Add(h.ttl).UnixMilli()
	in := &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: encodeHeartbeat(ownerName(h.id, gen), expMs)}
	if renew {
		in.ConditionExpression = aws.String("#exp > :now")
		in.ExpressionAttributeNames = map[string]string{"#exp": attrExpiresMs}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":now": num(now.UnixMilli())}
	}
	if _, err := r.client.PutItem(ctx, in); err != nil {
		return err
	}
	h.written = true
	h.expMs.Store(expMs)
	return nil
}

// heldOwner is the owner attribute for an op under hold id.
func (r *driver) heldOwner(id registry.HoldID) (string, error) {
	h := r.holds.get(id)
	if h == nil {
		return "", fmt.Errorf("dynamodb: %w: unknown or ended hold %q", registry.ErrNoHold, id)
	}
	return h.owner(), nil
}

// maxBatchGet is DynamoDB's limit on the keys of one BatchGetItem call.
const maxBatchGet = 100

// heartbeats returns the expiry (epoch ms) of each of owners' heartbeats that exists:
// one strongly consistent BatchGetItem per 100 owners, whatever the number of
// entries they hold.
func (r *driver) heartbeats(ctx context.Context, owners map[string]bool) (map[string]int64, error) {
	exp := make(map[string]int64, len(owners))
	var keys []map[string]types.AttributeValue
	for o := range owners {
		keys = append(keys, heartbeatKey(o))
	}
	for len(keys) > 0 {
		n := min(len(keys), maxBatchGet)
		if err := r.readHeartbeats(ctx, keys[:n], exp); err != nil {
			return nil, err
		}
		keys = keys[n:]
	}
	return exp, nil
}

// readHeartbeats reads one batch of heartbeat keys into exp, asking again for the
// keys DynamoDB left unprocessed. An unreadable heartbeat counts as missing.
func (r *driver) readHeartbeats(ctx context.Context, keys []map[string]types.AttributeValue, exp map[string]int64) error {
	b := backoff.Backoff{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond}
	for len(keys) > 0 {
		out, err := r.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{r.table: {Keys: keys, ConsistentRead: aws.Bool(true)}},
		})
		if err != nil {
			return err
		}
		for _, item := range out.Responses[r.table] {
			owner, ms, err := decodeHeartbeat(item)
			if err != nil {
				r.log.Warn("dynamodb: unreadable hold heartbeat; its entries are hidden",
					"table", r.table, "sk", attrString(item, attrSK), "err", err)
				continue
			}
			exp[owner] = ms
		}
		keys = out.UnprocessedKeys[r.table].Keys
		if len(keys) > 0 && !b.Wait(ctx) {
			return ctx.Err()
		}
	}
	return nil
}
