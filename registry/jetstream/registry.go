package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Lookup strategies for List.
const (
	// LookupConsumer picks the read per lookup. A full lookup reads with a
	// short-lived ordered-style consumer that delivers the last message per
	// subject, the fastest way to read many entries. A filtered lookup on a stream
	// that allows direct get reads with one batched last-per-subject direct get
	// (multi_last), which on a replicated stream is checked against the leader's
	// last sequence, so it sees every write acknowledged before it began; without
	// direct get, or when more subjects match than one multi_last returns, it uses
	// the consumer too. It never needs direct get. A consumer is R1 and the server
	// places it on any replica of the stream, so on a replicated stream a consumer
	// read can miss a write acknowledged a moment before (docs/backends.md).
	LookupConsumer = "consumer"
	// LookupDirect reads with direct get only: multi_last for a filtered lookup,
	// batched direct get by sequence for the rest. Any replica answers, which
	// spreads read load across an R3 stream but may trail the leader by a moment, and
	// no consumer is created (no meta-group traffic per lookup in a cluster). It
	// needs a stream that allows direct get.
	LookupDirect = "direct"
)

// DefaultWatchRescan is how often a watch looks for entries removed without a marker.
const DefaultWatchRescan = time.Minute

// Options configure New.
type Options struct {
	Stream StreamConfig
	// CreateStream creates the stream from Stream when it does not exist. An existing
	// stream is only checked, never changed: resizing it is EnsureStream's job.
	CreateStream bool
	// Lookup is LookupConsumer (default) or LookupDirect.
	Lookup string
	// WatchRescan is how often a watch re-reads which of its entries still exist, to
	// report the ones removed without a marker (another writer's purge) as Removed:
	// zero means DefaultWatchRescan, negative turns it off. Each rescan reads the
	// watch's subjects without payloads.
	WatchRescan time.Duration
	// Logger receives warnings about undecodable messages and watch resyncs.
	Logger *slog.Logger
	// Undecodable, when set, counts messages that could not be read as entries, in
	// addition to the driver's Undecodable.
	Undecodable prometheus.Counter
	// Reaped, when set, counts the held entries this registry's reaper removed
	// because their hold's liveness ended (reaper.go), in addition to the driver's
	// Reaped.
	Reaped prometheus.Counter
}

// driver is the JetStream backend's driver, used through a registry.Front: a stream
// used as a KV store, with a change feed. It is safe for concurrent use.
type driver struct {
	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	subj    Subjects
	cfg     StreamConfig
	lookup  string
	rescan  time.Duration // 0: off
	log     *slog.Logger
	metric  prometheus.Counter
	bad     atomic.Uint64
	cache   payloadCache
	// listed is set by the first List: the payload cache is filled from the second
	// on (see collector.remember).
	listed atomic.Bool
	// allowDirect: the stream allowed direct get when opened, so filtered lookups
	// use multi_last. Cleared when a server says otherwise.
	allowDirect atomic.Bool
	// written is the highest stream sequence this driver's writes were
	// acknowledged with: what a filtered lookup's answer must cover on an R1 stream.
	written atomic.Uint64
	// maxAge is the stream's MaxAge when opened (0: none): how long an entry
	// without a TTL lives, and the cap on those with one.
	maxAge time.Duration
	// fallbacks counts filtered lookups multi_last could not serve.
	fallbacks atomic.Uint64
	// Tests set these to drive one read path, or short multi_last pages.
	forcePath         readPath
	multiLastMaxBytes int

	// holds are the liveness subjects this driver keeps (hold.go).
	holds holds
	// life ends when the driver closes: it stops the holds' renewals and the reaper,
	// which tasks counts.
	life        context.Context
	endLife     context.CancelFunc
	tasks       sync.WaitGroup
	reaperOnce  sync.Once
	reaped      atomic.Uint64
	reapedCount prometheus.Counter

	mu sync.Mutex
	// replicas is the stream's replica count as read at replicasAt (readConsistent).
	replicas   int
	replicasAt time.Time
	router     *ackRouter     // Apply's acks; set on first use
	bg         sync.WaitGroup // consumer deletions (feed.stop), started by calls before Close
}

var _ registry.WatchDriver = (*driver)(nil)

// New returns a registry over nc, which stays the caller's: Close does not close it.
// It checks the stream (creating it if asked) before returning.
func New(ctx context.Context, nc *nats.Conn, o Options) (*registry.Front, error) {
	return registry.Wrap("jetstream")(newDriver(ctx, nc, o))
}

func newDriver(ctx context.Context, nc *nats.Conn, o Options) (*driver, error) {
	cfg := o.Stream.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subj, _ := NewSubjects(cfg.Prefix) // validated above
	switch o.Lookup {
	case "":
		o.Lookup = LookupConsumer
	case LookupConsumer, LookupDirect:
	default:
		return nil, fmt.Errorf("lookup %q: want %q or %q", o.Lookup, LookupConsumer, LookupDirect)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPendingAcks))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	before := nc.LastError()
	got, err := openStream(ctx, js, cfg, o.CreateStream, o.Lookup)
	if err != nil {
		return nil, unavailable(deniedSince(nc, before, err))
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rescan := o.WatchRescan
	switch {
	case rescan == 0:
		rescan = DefaultWatchRescan
	case rescan < 0:
		rescan = 0
	}
	r := &driver{
		nc: nc, js: js, subj: subj, cfg: cfg, lookup: o.Lookup, rescan: rescan,
		log: log.With("stream", cfg.Name), metric: o.Undecodable,
		replicas: got.Replicas, replicasAt: time.Now(), maxAge: got.MaxAge, reapedCount: o.Reaped,
	}
	r.life, r.endLife = context.WithCancel(context.Background())
	r.allowDirect.Store(got.AllowDirect)
	return r, nil
}

// Undecodable is how many messages this registry has read that were neither an entry
// nor a removal. Each was also logged. Reach it through the Front's Driver, as an
// interface{ Undecodable() uint64 }; Options.Undecodable counts them as a metric.
func (r *driver) Undecodable() uint64 { return r.bad.Load() }

// noteBad counts and logs a message that could not be read as an entry. The log is
// at debug: another writer's unusable entries are met on every read, and the count
// (Undecodable, the metric) is what tells an operator about them.
func (r *driver) noteBad(d decoded) {
	r.bad.Add(1)
	if r.metric != nil {
		r.metric.Inc()
	}
	r.log.Debug("skipping undecodable registration message", "subject", d.subject, "error", d.err)
}

// Close releases what Apply and the reads left: the holds' renewals (their liveness
// then expires on its own), the reaper, the ack subscription, the async publisher,
// consumer deletions still under way; and the connection, when the
// registry opened it. The Front has ended every call and watch before.
func (r *driver) Close() error {
	// The holds' renewals and the reaper first: the reaper's feed counts its
	// consumer's deletion in bg as it stops.
	r.endLife()
	r.tasks.Wait()
	r.bg.Wait()
	r.mu.Lock()
	router := r.router
	r.mu.Unlock()
	if router != nil {
		router.close()
	}
	r.js.CleanupPublisher()
	if r.ownConn {
		r.nc.Close()
	}
	return nil
}

// unavailable marks errors that mean "could not reach the stream" so callers can
// retry; server verdicts (a wrong stream, a bad request) pass through unchanged.
func unavailable(err error) error {
	if err == nil || errors.Is(err, registry.ErrUnavailable) {
		return err
	}
	for _, target := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionClosed,
		nats.ErrDisconnected, jetstream.ErrNoStreamResponse, jetstream.ErrAsyncPublishTimeout,
		jetstream.ErrJetStreamNotEnabled, jetstream.ErrNoHeartbeat,
	} {
		if errors.Is(err, target) {
			return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
		}
	}
	return err
}

// noteWritten records that a write of this driver was acknowledged at seq.
func (r *driver) noteWritten(seq uint64) {
	for {
		cur := r.written.Load()
		if seq <= cur || r.written.CompareAndSwap(cur, seq) {
			return
		}
	}
}
