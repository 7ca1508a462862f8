package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/mirror"
	"github.com/switchboard-mesh/switchboard/agent/ui"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Output is kept current from the registry's endpoints: a rendered template
// (render.Output), a Prometheus file_sd file (filesd.Output), or a discovery Server.
type Output interface {
	// Name identifies the output in logs and metrics.
	Name() string
	// Update brings the output up to date with eps (sorted as endpoint.Sort does) and
	// reports whether it wrote.
	Update(ctx context.Context, eps []endpoint.Endpoint) (bool, error)
}

// DiscoveryOptions configure a Discovery.
type DiscoveryOptions struct {
	// Debounce is the longest an output lags a change: changes are gathered for this
	// long after the first one, then rendered together. Default 250ms.
	Debounce time.Duration
	// PollInterval is how often a backend without a change feed is listed; default 10s.
	PollInterval time.Duration
	// RetryInterval is when outputs are tried again after one failed; default 10s.
	RetryInterval time.Duration
	Logger        *slog.Logger
	Metrics       *Metrics
}

// Discovery keeps outputs current from a mirror of the registry.
type Discovery struct {
	mirror  *mirror.Mirror
	outputs []Output
	opts    DiscoveryOptions
	log     *slog.Logger
	trigger chan struct{}
	synced  sync.Once
	ready   chan struct{}
	release func() // stops following the outputs' demand (demand.go)
	warned  *warnedSet
	// updates keeps each output's last update for the agent's page, and changes
	// is bumped after each round (inspect.go); Run sets changes.
	updates outputLog
	changes *ui.Changes
}

// NewDiscovery returns a Discovery over src; Run starts it.
func NewDiscovery(src registry.Registry, outputs []Output, o DiscoveryOptions) *Discovery {
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	view, release := narrowed(src, outputs)
	m := mirror.New(view, mirror.Options{PollInterval: o.PollInterval, Logger: o.Logger})
	return &Discovery{mirror: m, outputs: outputs, opts: o, log: o.Logger, trigger: make(chan struct{}, 1), ready: make(chan struct{}), release: release, warned: newWarnedSet()}
}

// Trigger renders every output again soon, e.g. after a template was edited.
func (d *Discovery) Trigger() {
	select {
	case d.trigger <- struct{}{}:
	default:
	}
}

// Ready is closed once the registry has been mirrored completely and the outputs
// rendered from it once.
func (d *Discovery) Ready() <-chan struct{} { return d.ready }

// Run mirrors the registry and renders the outputs until ctx ends.
func (d *Discovery) Run(ctx context.Context) error {
	defer d.release()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.mirror.Run(ctx)
	}()
	defer wg.Wait()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.mirror.Changed():
		case <-d.trigger:
		case <-retry:
		}
		// Gather the changes of one debounce period into one render.
		if !backoff.Sleep(ctx, d.opts.Debounce) {
			return nil
		}
		select {
		case <-d.mirror.Changed():
		default:
		}
		retry = nil
		if !d.updateAll(ctx) {
			retry = time.After(d.opts.RetryInterval)
		}
	}
}

// updateAll updates every output from one snapshot; it reports whether all succeeded.
func (d *Discovery) updateAll(ctx context.Context) bool {
	eps, synced := d.mirror.Snapshot()
	if !synced {
		return true // an incomplete copy would render a partial file
	}
	d.opts.Metrics.discovered(len(eps))
	ok := true
	for _, o := range d.outputs {
		wrote, err := o.Update(ctx, eps)
		d.opts.Metrics.output(o.Name(), wrote, err)
		d.updates.record(o.Name(), wrote, err, time.Now())
		d.reportRefused(o)
		switch {
		case err != nil:
			ok = false
			d.log.Error("output not updated; it keeps its last good content", "output", o.Name(), "err", err)
		case wrote:
			d.log.Info("output updated", "output", o.Name(), "endpoints", len(eps))
		}
	}
	d.synced.Do(func() { close(d.ready) })
	d.changes.Bump()
	return ok
}
