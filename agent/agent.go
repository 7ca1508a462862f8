package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/ui"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Publisher writes registrations; every registry.Registry is one.
type Publisher interface {
	Apply(ctx context.Context, ops []registry.Op) error
}

// NoopPublisher accepts every write and stores nothing: the publisher of a node
// without a registry backend.
type NoopPublisher struct{}

// Apply does nothing.
func (NoopPublisher) Apply(context.Context, []registry.Op) error { return nil }

// Options configure an Agent.
type Options struct {
	// Publisher receives the registrations; nil means NoopPublisher, which the agent
	// says once in its log.
	Publisher Publisher
	// DryRun runs the checks and the gate but never writes (the spec's no-op mode).
	DryRun bool
	// KeepWhenUnhealthy stops refreshing an entry whose checks fail instead of
	// removing it at once; it then lives until its TTL runs out.
	KeepWhenUnhealthy bool
	// Resync is how often an entry without a TTL is published again while the gate is
	// open, so that a registry that lost it (a stream's MaxAge, a restarted in-memory
	// backend) gets it back; default 5m, negative disables it.
	Resync time.Duration
	// WriteTimeout bounds one registry write; default 10s.
	WriteTimeout time.Duration
	// ShutdownTimeout bounds the removals made on shutdown; default 5s.
	ShutdownTimeout time.Duration
	// Region and Zone are the node's locality, given to the entries that name none
	// (localize: one naming a zone takes no region, one in another region no zone);
	// empty: none.
	Region, Zone string
	// DrainGrace is how long, on shutdown, the entries clients route to stay
	// published as Draining before they are removed, so that clients move their new
	// work elsewhere first; 0 removes them at once (drain.go).
	DrainGrace time.Duration
	// SkipDrain ends the grace period early when it receives or is closed: a second
	// SIGTERM. Nil: the grace period always runs out.
	SkipDrain <-chan struct{}
	// RetryMin and RetryMax bound the backoff after a failed write; defaults 500ms, 30s.
	RetryMin, RetryMax time.Duration
	Logger             *slog.Logger
	// Metrics, when set, receives the agent's metrics.
	Metrics *Metrics
}

// RefreshFraction is the part of an entry's TTL after which it is published again, so
// that two refreshes can fail before the entry expires.
const RefreshFraction = 3

// Agent publishes a manifest's entries through the publish gate. Create it with New
// and run it with Run; Reload and Status may be called from any goroutine.
type Agent struct {
	opts Options
	log  *slog.Logger
	pub  Publisher

	// wake tells the loop that a reload is pending.
	wake chan struct{}

	mu      sync.Mutex
	pending *reload // the latest Reload or ReloadFailed not yet applied
	// sources holds the latest SetSource entries of each source not yet applied.
	sources map[string][]manifest.Entry
	// statuses is what the loop last published. The loop writes over an array
	// once another is published (publishStatus): read statuses under mu only,
	// and copy them out.
	statuses []EntryStatus
	// notReady says why the agent is not ready yet (Ready); empty once it is.
	notReady string
	// changes counts the changes of what the agent's page shows (inspect.go).
	changes ui.Changes
}

type reload struct {
	m   *manifest.Manifest
	err error
}

// New returns an agent for m (nil: no entries).
func New(m *manifest.Manifest, o Options) *Agent {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Resync == 0 {
		o.Resync = 5 * time.Minute
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(30*time.Second, o.RetryMin)
	}
	a := &Agent{opts: o, log: o.Logger, pub: o.Publisher, wake: make(chan struct{}, 1)}
	if a.pub == nil {
		a.pub = NoopPublisher{}
		a.log.Warn("no registry backend configured: entries pass the gate but are published nowhere (no-op publisher)")
	}
	if m == nil {
		m = &manifest.Manifest{}
	}
	a.pending = &reload{m: m}
	return a
}

// Reload replaces the manifest: entries that left it are removed from the registry,
// new ones start their checks, and a failed apply recorded by ReloadFailed is cleared.
// An entry whose checks changed starts over as unhealthy, like a new one: it is
// published again once the new checks pass.
func (a *Agent) Reload(m *manifest.Manifest) { a.setPending(&reload{m: m}) }

// ReloadFailed records that loading a new manifest failed. The publish gate closes
// ("the last apply did not fail") until a Reload succeeds: entries are no longer
// refreshed, and those with a TTL expire.
func (a *Agent) ReloadFailed(err error) { a.setPending(&reload{err: err}) }

func (a *Agent) setPending(r *reload) {
	a.mu.Lock()
	a.pending = r
	a.mu.Unlock()
	a.nudge()
}

// SetSource replaces the entries of one source other than the manifest: the node's
// pods are one. They pass the same publish gate as the manifest's entries, and an
// entry whose endpoint and checks are unchanged keeps its state. A failed manifest
// load does not hold them back. When two sources name the same key, the manifest's
// entry wins, then the source whose name sorts first.
func (a *Agent) SetSource(name string, entries []manifest.Entry) {
	a.mu.Lock()
	if a.sources == nil {
		a.sources = map[string][]manifest.Entry{}
	}
	a.sources[name] = slices.Clone(entries)
	a.mu.Unlock()
	a.nudge()
}

func (a *Agent) nudge() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Agent) takePending() (*reload, map[string][]manifest.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, s := a.pending, a.sources
	a.pending, a.sources = nil, nil
	return r, s
}

// EntryStatus is the state of one manifest entry.
type EntryStatus struct {
	Key endpoint.Key
	// Source is "" for a manifest entry, else the name given to SetSource.
	Source  string
	Healthy bool
	// Registered says the last write for the entry registered it.
	Registered bool
	// Reason is why the gate is closed; empty when it is open.
	Reason string
	// Held says the entry's source holds it back (Reason says why); Since is when
	// the gate's answer last changed; WriteError is the last registry write's
	// error while writes fail.
	Held       bool
	Since      time.Time
	WriteError string
	Checks     []CheckStatus
	// Region, Zone and Health are the entry's, as the agent publishes it.
	Region, Zone string
	Health       endpoint.Health
}

// CheckStatus is the state of one check.
type CheckStatus struct {
	Check     string
	Healthy   bool
	LastError string
	// State holds the counters and recent results, for the agent's page.
	State check.State
}

// Ready reports whether the agent does what its manifest asks: the manifest is
// applied, every check has a first result, and the registry took the last write of
// every entry. When it is not, why says what it waits for.
func (a *Agent) Ready() (ready bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.notReady == "", a.notReady
}

// Status returns the state of every entry, in manifest order, as of the loop's last
// step. The entries' Checks are shared with the agent and with other callers: do
// not modify them.
func (a *Agent) Status() []EntryStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]EntryStatus(nil), a.statuses...)
}
