package registrar

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Config configures a Registrar. Zero durations and sizes take the defaults of
// docs/registrar.md.
type Config struct {
	// Cluster is the only cluster this registrar accepts writes for (--cluster-name).
	Cluster string
	// AlsoAccept lists further clusters this registrar takes writes for, "*" for
	// any: for a registrar that fronts several logical clusters, such as a
	// single-machine setup. Empty in a normal deployment.
	AlsoAccept []string
	// Backend is the external registry. The caller owns it and closes it after Run
	// returns.
	Backend registry.Registry
	// SyncInterval is how often the whole backend is listed; default 5s. While the
	// backend's change feed is live, BackstopInterval (default 1m) applies instead:
	// the feed carries every change, and the list is only a backstop that repairs
	// what it may have missed, but costs a read of the whole backend (about 90 ms
	// of CPU for 10,000 endpoints in etcd, growing with the fleet).
	SyncInterval     time.Duration
	BackstopInterval time.Duration
	// BatchInterval and BatchSize: a write batch is flushed after BatchInterval
	// (default 100ms) or as soon as BatchSize (default 50) writes are waiting.
	BatchInterval time.Duration
	BatchSize     int
	// MaxQueue bounds the accepted writes not yet persisted; beyond it writes are
	// refused with RESOURCE_EXHAUSTED. Default 65536.
	MaxQueue int
	// History is how many recent events are kept for resuming watchers; a watcher
	// further behind gets a full snapshot. Default 16384.
	History int
	// BackendTimeout bounds one List or Apply; default 10s.
	BackendTimeout time.Duration
	// DrainTimeout bounds how long shutdown keeps trying to persist queued writes;
	// default 10s.
	DrainTimeout time.Duration
	// ProgressInterval is how often the registrar checks whether persisted writes
	// that changed nothing (refreshes) still wait for a confirmation, and sends
	// watchers a PROGRESS event if so; default 1s.
	ProgressInterval time.Duration
	// Authorizer decides what each client-certificate identity may write (and read);
	// a caller without a client certificate may write nothing. Nil lets every
	// caller write anything: for a registrar without mTLS, which cannot tell its
	// callers apart.
	Authorizer *Authorizer
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Metrics is where the registrar's series are registered; nil skips them.
	Metrics prometheus.Registerer
	// LivenessTTL, when positive, has this replica keep alive the entries agents
	// register with a session for as long as the session's watch stream stays open
	// to it, writing each entry to the backend once instead of at every refresh
	// (liveness.go). It is how long the replica's entries outlive it: the time its
	// agents have to re-home to another replica, which takes them over. Zero: every
	// entry lives by its TTL, each refresh written through. Only backends with holds
	// (etcd, JetStream, DynamoDB, memory) can; with others it is ignored.
	LivenessTTL time.Duration
	// Hold is what this replica keeps in its snapshot: HoldAll (the default), every
	// cluster's endpoints; or HoldDemanded, its own cluster's and, of the other
	// clusters, only the services its scoped watchers ask for (demand.go). A full
	// watch then sees what is held; ListAllEndpoints reads the backend for what is
	// not.
	Hold string
	// HoldGrace is how long a demanded service stays held after its last watcher
	// (DefaultHoldGrace when zero).
	HoldGrace time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if err := endpoint.ValidateName("cluster", c.Cluster); err != nil {
		return c, fmt.Errorf("registrar: %w", err)
	}
	for _, a := range c.AlsoAccept {
		if a != "*" {
			if err := endpoint.ValidateName("cluster", a); err != nil {
				return c, fmt.Errorf("registrar: also-accepted %w", err)
			}
		}
	}
	if c.Backend == nil {
		return c, errors.New("registrar: a registry backend is required")
	}
	if c.LivenessTTL > 0 && c.LivenessTTL < registry.MinHoldTTL {
		return c, fmt.Errorf("registrar: liveness ttl %s: must be 0 (off) or at least %s", c.LivenessTTL, registry.MinHoldTTL)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.SyncInterval, 5*time.Second)
	def(&c.BackstopInterval, time.Minute)
	def(&c.BatchInterval, 100*time.Millisecond)
	def(&c.BackendTimeout, 10*time.Second)
	def(&c.DrainTimeout, 10*time.Second)
	def(&c.ProgressInterval, time.Second)
	def(&c.HoldGrace, DefaultHoldGrace)
	if c.Hold == "" {
		c.Hold = HoldAll
	}
	if err := validHold(c.Hold); err != nil {
		return c, err
	}
	for _, p := range []struct {
		v   *int
		def int
	}{{&c.BatchSize, 50}, {&c.MaxQueue, 65536}, {&c.History, 16384}} {
		if *p.v <= 0 {
			*p.v = p.def
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Registrar is one replica. Replicas of a cluster are independent: each accepts
// writes, persists them, keeps its own snapshot and serves its own watchers.
type Registrar struct {
	cfg  Config
	view *view.View
	// hub runs the watchers, which the view's changes are signalled to.
	hub *hub.Hub
	// closing is closed at shutdown: every watch stream ends.
	closing   chan struct{}
	closeOnce sync.Once
	log       *slog.Logger
	m         *metrics
	ids       atomic.Uint64
	watchers  atomic.Int64
	// demand holds the services of other clusters watchers ask for (--hold
	// demanded); nil when every cluster's endpoints are held.
	demand *demand
	// insp and syncer are what Status reports (inspect.go).
	insp   inspector
	syncer atomic.Pointer[syncer]

	runOnce sync.Once
	abort   atomic.Bool
	// live holds agents' entries by their sessions (liveness.go).
	live *liveness
}

// New returns a registrar; Run starts it.
func New(cfg Config) (*Registrar, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Metrics)
	if err := registerBackendMetrics(cfg.Metrics, cfg.Backend); err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("registrar: draw epoch: %w", err)
	}
	epoch := binary.BigEndian.Uint64(b[:])
	r := &Registrar{cfg: cfg, m: m, log: cfg.Logger.With("cluster", cfg.Cluster), closing: make(chan struct{}), live: newLiveness()}
	r.livenessMetrics(cfg.Metrics)
	if cfg.Hold == HoldDemanded {
		r.demand = newDemand(r)
		r.demand.metrics(cfg.Metrics)
	}
	r.view = view.New(view.Config{Epoch: epoch, History: cfg.History, MaxQueue: cfg.MaxQueue, EventCap: hub.TrackedCap,
		WrapEvent: wrapEvent, WrapPart: wrapPart, WrapSnapshot: wrapSnapshot,
		Changed: r.signalAll, Count: m.endpointCount, QueueDepth: m.queueDepth})
	r.hub = hub.New(hub.Config{View: r.view, ProgressInterval: cfg.ProgressInterval, Closing: r.closing, ErrClosing: errShuttingDown,
		Log: r.log, Broadcast: m.broadcast[:], Resyncs: m.resyncs,
		Encoded: func(msg []byte) any { return encoded(msg) }, Message: message, Raw: eventBytes,
		Open: r.openStream, Rescoped: r.rescoped})
	return r, nil
}

// Run syncs with the backend and persists writes until ctx ends. Then it ends every
// watch stream (agents reconnect to another replica) and persists the queued writes,
// trying for up to DrainTimeout; it returns an error if some could not be written.
func (r *Registrar) Run(ctx context.Context) error {
	first := false
	r.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("registrar: Run called twice")
	}
	y := r.newSyncer(endpoint.Filter{}, nil, true)
	loops := []func(context.Context){y.pollLoop, y.watchLoop}
	if d := r.demand; d != nil {
		// The clusters this replica accepts writes for are its own part; read with
		// a filter on the cluster when that is its own alone.
		y.scope = func(k endpoint.Key) bool { return r.cfg.accepts(k.Cluster) }
		if len(r.cfg.AlsoAccept) == 0 {
			y.filter = endpoint.Filter{Cluster: r.cfg.Cluster}
		}
		d.mu.Lock()
		d.ctx = ctx
		d.mu.Unlock()
		loops = append(loops, d.loop)
	}
	r.syncer.Store(y)
	w := &writer{view: r.view, backend: r.cfg.Backend, interval: r.cfg.BatchInterval, size: r.cfg.BatchSize,
		timeout: r.cfg.BackendTimeout, log: r.log, m: r.m, backoff: backoff.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}}
	if f := r.holdFront(); f != nil {
		r.takeHold(ctx, f) // liveness_loop.go; livenessLoop retries
	}
	var wg sync.WaitGroup
	for _, loop := range append(loops, w.run, r.progressLoop, r.senderLoop, r.livenessLoop) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	r.log.Info("registrar running", "epoch", fmt.Sprintf("%016x", r.view.Epoch()), "sync_interval", r.cfg.SyncInterval, "backstop_interval", r.cfg.BackstopInterval,
		"batch_interval", r.cfg.BatchInterval, "batch_size", r.cfg.BatchSize, "hold", r.cfg.Hold)
	<-ctx.Done()
	r.close()
	wg.Wait()
	if r.abort.Load() {
		n := r.view.PendingCount()
		r.log.Warn("registrar aborted; queued writes dropped", "dropped", n)
		return nil
	}
	dctx, cancel := context.WithTimeout(context.Background(), r.cfg.DrainTimeout)
	defer cancel()
	if left := w.drain(dctx); left > 0 {
		return fmt.Errorf("registrar: %d accepted writes could not be persisted before shutdown", left)
	}
	r.log.Info("registrar stopped; every accepted write is persisted")
	return nil
}

// newSyncer returns a syncer of the part of the backend filter reads (its keys
// those in scope; nil: all); main is the registrar's own part's.
func (r *Registrar) newSyncer(filter endpoint.Filter, scope func(endpoint.Key) bool, main bool) *syncer {
	return &syncer{view: r.view, filter: filter, scope: scope, main: main, loaded: make(chan struct{}),
		backend: r.cfg.Backend, interval: r.cfg.SyncInterval, backstop: r.cfg.BackstopInterval, timeout: r.cfg.BackendTimeout,
		log: r.log, m: r.m, noFeed: make(chan struct{})}
}

// progressLoop announces the persisted frontier on a quiet registrar (View.Announce).
func (r *Registrar) progressLoop(ctx context.Context) {
	every(ctx, r.cfg.ProgressInterval, r.view.Announce)
}

// senderLoop replaces the senders that stalled clients hold (hub.Hub.Tick).
func (r *Registrar) senderLoop(ctx context.Context) {
	every(ctx, hub.StuckAfter, r.hub.Tick)
}

// every runs fn once a period until ctx ends.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// accepts reports whether writes for cluster are taken here.
func (c Config) accepts(cluster string) bool {
	if cluster == c.Cluster {
		return true
	}
	for _, a := range c.AlsoAccept {
		if a == "*" || a == cluster {
			return true
		}
	}
	return false
}

// Abort makes a Run that ends afterwards skip persisting the queued writes, as if the
// process had crashed. Tests use it to kill a replica.
func (r *Registrar) Abort() { r.abort.Store(true) }

// Ready is closed once the registrar has read the backend's full state.
func (r *Registrar) Ready() <-chan struct{} { return r.view.Ready() }

// Counts returns the endpoints in the snapshot per cluster.
func (r *Registrar) Counts() map[string]int { return r.view.Counts() }

// Pending returns the number of accepted writes not yet persisted.
func (r *Registrar) Pending() int { return r.view.PendingCount() }

// Watchers returns the number of open watch streams.
func (r *Registrar) Watchers() int { return int(r.watchers.Load()) }

// signalAll signals every watcher that the view appended events
// (view.Config.Changed).
func (r *Registrar) signalAll() { r.hub.SignalAll() }

// close ends every watch stream.
func (r *Registrar) close() {
	r.closeOnce.Do(func() { close(r.closing) })
	r.hub.SignalAll()
}
