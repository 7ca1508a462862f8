package mirror

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Options configure a Mirror.
type Options struct {
	// Filter selects what to mirror; the zero value mirrors everything.
	Filter endpoint.Filter
	// PollInterval is how often backends without a change feed are listed; default 10s.
	PollInterval time.Duration
	// RetryMin and RetryMax bound the backoff after a failure; defaults 200ms and 30s.
	RetryMin, RetryMax time.Duration
	Logger             *slog.Logger
}

// Mirror is a local copy of a registry's endpoints. It is safe for concurrent use.
type Mirror struct {
	src  registry.Registry
	opts Options
	log  *slog.Logger

	changed chan struct{}

	mu      sync.Mutex
	entries map[endpoint.Key]endpoint.Endpoint
	sorted  []endpoint.Endpoint // nil: rebuild on the next Snapshot
	synced  bool
	version uint64
}

// New returns a mirror of src; call Run to fill it.
func New(src registry.Registry, o Options) *Mirror {
	if o.PollInterval <= 0 {
		o.PollInterval = 10 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 200 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(30*time.Second, o.RetryMin)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Mirror{src: src, opts: o, log: o.Logger, changed: make(chan struct{}, 1), entries: map[endpoint.Key]endpoint.Endpoint{}}
}

// Changed receives a value after the copy changed; several changes may be reported
// once. The first one comes when the copy is first complete (synced).
func (m *Mirror) Changed() <-chan struct{} { return m.changed }

// Snapshot returns the endpoints, sorted as endpoint.Sort does, and whether the copy
// has been complete at least once. The slice is shared: callers must not modify it.
func (m *Mirror) Snapshot() ([]endpoint.Endpoint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sorted == nil {
		m.sorted = make([]endpoint.Endpoint, 0, len(m.entries))
		for _, e := range m.entries {
			m.sorted = append(m.sorted, e)
		}
		endpoint.Sort(m.sorted)
	}
	return m.sorted, m.synced
}

// Version counts the changes applied so far.
func (m *Mirror) Version() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

// Run keeps the copy current until ctx ends; it returns nil then.
func (m *Mirror) Run(ctx context.Context) error {
	if w, ok := m.src.(registry.Watcher); ok {
		if err := m.watchLoop(ctx, w); !errors.Is(err, registry.ErrNoWatch) {
			return nil
		}
		m.log.Info("registry has no change feed: polling", "interval", m.opts.PollInterval)
	}
	m.pollLoop(ctx)
	return nil
}

// notify signals Changed without blocking; one pending signal covers many changes.
func (m *Mirror) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// replace swaps in a complete copy and signals when it differs from the old one or is
// the first complete copy.
func (m *Mirror) replace(entries map[endpoint.Key]endpoint.Endpoint) {
	m.mu.Lock()
	changed := !m.synced || !maps.EqualFunc(m.entries, entries, endpoint.Equal)
	m.entries, m.synced = entries, true
	if changed {
		m.sorted = nil
		m.version++
	}
	m.mu.Unlock()
	if changed {
		m.notify()
	}
}

// apply records one live change; before the first sync it only builds the copy.
func (m *Mirror) apply(ev registry.Event) {
	m.mu.Lock()
	k := ev.Endpoint.Key()
	old, had := m.entries[k]
	switch ev.Type {
	case registry.Added, registry.Updated:
		if had && endpoint.Equal(old, ev.Endpoint) {
			m.mu.Unlock()
			return
		}
		m.entries[k] = ev.Endpoint
	case registry.Removed:
		if !had {
			m.mu.Unlock()
			return
		}
		delete(m.entries, k)
	}
	m.sorted = nil
	m.version++
	synced := m.synced
	m.mu.Unlock()
	if synced {
		m.notify()
	}
}

// retry spaces retries after failures: full jitter over a capped exponential, so
// that many agents retrying one backend spread out.
func (m *Mirror) retry() backoff.Backoff {
	return backoff.Backoff{Min: m.opts.RetryMin, Max: m.opts.RetryMax}
}
