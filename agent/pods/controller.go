package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// SourceName is the name the pods' entries are handed to the Sink under.
const SourceName = "pods"

// DefaultResync is how often the reconciler recomputes everything unless configured.
const DefaultResync = 30 * time.Second

// Sink receives the pods' entries; *agent.Agent is one. SetSource replaces the
// entries of one named source and must not block for long.
type Sink interface {
	SetSource(name string, entries []manifest.Entry)
}

// Config configures a Controller.
type Config struct {
	// StateDir holds the attachment records (e.g. /var/lib/switchboard/cni).
	StateDir string
	// Socket is the CNI server's Unix socket (e.g. /run/switchboard/cni.sock).
	Socket string
	// NodeName is this node: the pods listed are those with spec.nodeName=NodeName,
	// and it is every endpoint's node.
	NodeName string
	// Cluster is every endpoint's cluster.
	Cluster string
	// Selector picks the pods to register; nil means switchboard.dev/register=true.
	Selector labels.Selector
	// TTL of the pods' endpoints; 0 means DefaultTTL.
	TTL time.Duration
	// Resync is how often everything is recomputed even without a change, and the
	// informer's resync period; 0 means DefaultResync. It is also the grace a record
	// gets before a missing pod counts as gone (the informer may lag the CNI ADD).
	Resync time.Duration
	// RequireReady holds a pod's entries until it is Ready; nil means true.
	RequireReady *bool
	// Client reads the node's pods. Nil runs without the API: attachments are
	// recorded, but no entries can be derived (a WARN says so once).
	Client kubernetes.Interface
	// Sink receives the entries; required.
	Sink   Sink
	Logger *slog.Logger
	// Metrics, when set, receives the package's series.
	Metrics prometheus.Registerer
	// StopTimeout bounds the CNI server's graceful stop; default 5s.
	StopTimeout time.Duration
}

// Controller runs the CNI server and the reconciler that turns the node's pods into
// the Sink's "pods" source. Create it with New and run it once with Run; Ready may
// be called from any goroutine.
type Controller struct {
	cfg    Config
	derive DeriveConfig
	log    *slog.Logger
	m      *Metrics
	wake   chan struct{}

	started atomic.Bool
	store   atomic.Pointer[Store]
	src     atomic.Pointer[podSource]
}

// New checks cfg, fills in its defaults and registers the metrics.
func New(cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		derive: DeriveConfig{Cluster: cfg.Cluster, NodeName: cfg.NodeName, Selector: cfg.Selector, TTL: cfg.TTL, RequireReady: cfg.RequireReady}}
	if cfg.Metrics != nil {
		m, err := NewMetrics(cfg.Metrics)
		if err != nil {
			return nil, err
		}
		c.m = m
	}
	return c, nil
}

func (cfg *Config) defaults() error {
	switch {
	case cfg.StateDir == "":
		return errors.New("pods: a state directory is required")
	case cfg.Socket == "":
		return errors.New("pods: a CNI socket path is required")
	case cfg.NodeName == "":
		return errors.New("pods: the node name is required")
	case cfg.Sink == nil:
		return errors.New("pods: a sink is required")
	case cfg.Resync < 0:
		return fmt.Errorf("pods: resync %s: must not be negative", cfg.Resync)
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// The fields every endpoint shares are checked once here, by the endpoint rules,
	// rather than found wrong on every pod.
	probe := endpoint.Endpoint{Cluster: cfg.Cluster, Service: "probe", Protocol: "probe", Address: "127.0.0.1",
		Node: cfg.NodeName, Priority: 1, TTL: endpoint.TTL(cfg.TTL)}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	return nil
}

// nudge asks the reconciler for a step; it never blocks, and nudges that come while
// one is pending fold into it.
func (c *Controller) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Ready reports whether the controller can do its job, for the agent's /readyz: the
// records are loaded and, with a client, the node's pods are listed.
func (c *Controller) Ready() (bool, string) {
	if c.store.Load() == nil {
		return false, "pods: attachment records not loaded yet"
	}
	if c.cfg.Client == nil {
		return true, ""
	}
	if s := c.src.Load(); s == nil || !s.Synced() {
		return false, "pods: the node's pods are not listed from the Kubernetes API yet"
	}
	return true, ""
}

// Run loads the records, serves the CNI socket, watches the node's pods and keeps
// the Sink's "pods" source current until ctx ends. It returns an error when the
// records cannot be loaded or the socket cannot be served. It leaves the Sink's
// entries as they are on the way out: they are KeepOnShutdown, so that restarting
// the agent does not take the node's pods out of the registry.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("pods: Run called twice")
	}
	store, err := OpenStore(c.cfg.StateDir, c.log, c.m)
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	c.store.Store(store)
	ctx, cancel := context.WithCancel(ctx)
	var src *podSource
	defer func() {
		cancel() // the informer stops on ctx; Shutdown waits for that
		if src != nil {
			src.shutdown()
		}
	}()
	if c.cfg.Client == nil {
		c.log.Warn("no Kubernetes API client: pod attachments are recorded, but no pod is registered")
	} else {
		if src, err = newPodSource(c.cfg.Client, c.cfg.NodeName, c.cfg.Resync, c.nudge); err != nil {
			return fmt.Errorf("pods: %w", err)
		}
		c.src.Store(src)
		src.start(ctx.Done())
	}
	srv := NewServer(store, ServerOptions{Nudge: c.nudge, Logger: c.log, Metrics: c.m, StopTimeout: c.cfg.StopTimeout})
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ctx, c.cfg.Socket)
		if err != nil {
			cancel() // without its socket the controller is of no use: stop the rest too
		}
		served <- err
	}()
	r := newReconciler(c, store, src)
	if src != nil {
		r.previous = loadEntries(c.cfg.StateDir, c.log, time.Now())
	}
	r.run(ctx)
	return <-served
}
