package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrLost: the replica led and lost the lead (its lease may have expired). The
// caller must not act as leader any more; a process gives up and is restarted, as
// Kubernetes controllers do.
var ErrLost = errors.New("leadership lost")

// Info is what a replica publishes as its election value: how to reach it.
type Info struct {
	ID         string `json:"id"`
	Southbound string `json:"southbound,omitempty"`
	Northbound string `json:"northbound,omitempty"`
}

// Term identifies one leadership: the election key and its create revision, which
// the store's writes are fenced on.
type Term struct {
	Key string
	Rev int64
}

// Options configure New.
type Options struct {
	Client *clientv3.Client
	// Prefix is the election's key prefix.
	Prefix string
	// TTL is the lease: whole seconds, at least 2.
	TTL  time.Duration
	Self Info
	// OnLeader is called whenever the observed leader changes (ok false: none).
	OnLeader func(leader Info, ok bool)
	Logger   *slog.Logger
}

// Elector campaigns for one replica and observes who leads.
type Elector struct {
	o       Options
	log     *slog.Logger
	value   string
	leading atomic.Bool
	// dropWatch is a test hook: the observer loses this many watch responses.
	dropWatch atomic.Int32

	mu     sync.Mutex
	leader Info
	known  bool
	// self is this replica's election key while it leads; endTerm ends the term,
	// for an observation that the key is gone or not the oldest any more.
	self    string
	selfRev int64
	endTerm context.CancelFunc
}

// New checks the options.
func New(o Options) (*Elector, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("leader: Options.Client is required")
	case strings.Trim(o.Prefix, "/") == "":
		return nil, fmt.Errorf("leader: prefix %q must name a directory", o.Prefix)
	case o.TTL < 2*time.Second || o.TTL%time.Second != 0:
		return nil, fmt.Errorf("leader: lease TTL %s must be whole seconds, at least 2s", o.TTL)
	case o.Self.ID == "":
		return nil, errors.New("leader: Options.Self.ID is required")
	}
	o.Prefix = strings.TrimSuffix(o.Prefix, "/")
	b, err := json.Marshal(o.Self)
	if err != nil {
		return nil, err
	}
	e := &Elector{o: o, log: o.Logger, value: string(b)}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// IsLeader reports whether this replica leads now.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Leader returns the leader last observed (ok false when none is known).
func (e *Elector) Leader() (Info, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader, e.known
}

// margin is how long before the lease can expire the leader steps down: time for
// lead to stop what it runs, and for clock-rate differences.
func (e *Elector) margin() time.Duration { return max(e.o.TTL/4, 500*time.Millisecond) }

// Run campaigns until ctx ends (returning nil, after resigning if it led) or until
// the lead, once won, is lost (returning ErrLost). While this replica leads, lead
// runs with a context that ends when the lead ends; lead must return promptly then,
// having stopped everything only a leader may do.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, t Term)) error {
	octx, stop := context.WithCancel(ctx)
	var observing sync.WaitGroup
	observing.Go(func() { e.observe(octx) })
	defer func() { stop(); observing.Wait() }()
	for ctx.Err() == nil {
		led, err := e.term(ctx, lead)
		if led && ctx.Err() == nil {
			return ErrLost
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("leader election: campaign failed, retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(e.o.TTL / 4):
			}
		}
	}
	return nil
}

// term campaigns once with a new lease and, if elected, leads until ctx ends or the
// lease can no longer be trusted. led says whether it was elected.
func (e *Elector) term(ctx context.Context, lead func(ctx context.Context, t Term)) (led bool, err error) {
	sent := time.Now()
	grant, err := e.o.Client.Grant(ctx, int64(e.o.TTL/time.Second))
	if err != nil {
		return false, fmt.Errorf("grant lease: %w", err)
	}
	sess, err := concurrency.NewSession(e.o.Client, concurrency.WithLease(grant.ID), concurrency.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("session: %w", err)
	}
	// The lease is revoked, so that a successor need not wait for it to expire —
	// within the margin: Session.Close would wait up to a minute for an etcd that a
	// leader which lost it cannot reach.
	defer func() {
		sess.Orphan()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.margin())
		defer cancel()
		_, _ = e.o.Client.Revoke(rctx, grant.ID)
	}()
	dl := &deadline{}
	dl.extend(sent.Add(e.o.TTL - e.margin()))
	tctx, endTerm := context.WithCancel(ctx)
	var renewing sync.WaitGroup
	renewing.Go(func() { e.renew(tctx, grant.ID, dl, endTerm) })
	renewing.Go(func() { watchdog(tctx, dl, endTerm) })
	defer func() { endTerm(); renewing.Wait() }()

	el := concurrency.NewElection(sess, e.o.Prefix)
	if err := el.Campaign(tctx, e.value); err != nil {
		return false, fmt.Errorf("campaign: %w", err)
	}
	t := Term{Key: el.Key(), Rev: el.Rev()}
	e.mu.Lock()
	e.self, e.selfRev, e.endTerm = t.Key, t.Rev, endTerm
	e.mu.Unlock()
	e.leading.Store(true)
	e.log.Info("leadership acquired", "id", e.o.Self.ID, "key", t.Key, "rev", t.Rev, "at", time.Now().UnixNano())
	lead(tctx, t)
	e.leading.Store(false)
	e.mu.Lock()
	e.self, e.endTerm = "", nil
	e.mu.Unlock()
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.TTL)
		defer cancel()
		if err := el.Resign(rctx); err != nil {
			e.log.Warn("leader election: resign failed; the lease expires instead", "err", err)
		}
		e.log.Info("leadership resigned", "id", e.o.Self.ID)
		return true, nil
	}
	e.log.Warn("leadership lost: stopped leading", "id", e.o.Self.ID)
	return true, nil
}

// renew keeps the lease alive and moves the deadline to TTL less the margin after
// each renewal etcd acknowledged (counted from when it was sent). It ends the term
// when etcd says the lease is gone.
func (e *Elector) renew(ctx context.Context, id clientv3.LeaseID, dl *deadline, end context.CancelFunc) {
	every := e.o.TTL / 4
	for {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		_, err := e.o.Client.KeepAliveOnce(rctx, id)
		cancel()
		switch {
		case err == nil:
			dl.extend(sent.Add(e.o.TTL - e.margin()))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			end()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(sent.Add(every))):
		}
	}
}

// watchdog ends the term once the deadline passes. It runs apart from renew, whose
// calls to an unreachable etcd block.
func watchdog(ctx context.Context, dl *deadline, end context.CancelFunc) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if now.After(dl.get()) {
				end()
				return
			}
		}
	}
}

type deadline struct {
	mu sync.Mutex
	t  time.Time
}

func (d *deadline) extend(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.After(d.t) {
		d.t = t
	}
}

func (d *deadline) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.t
}
