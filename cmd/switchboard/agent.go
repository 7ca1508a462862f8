package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func init() { subcommands = append(subcommands, newAgentCmd) }

type agentFlags struct {
	manifest          string
	renders           []string
	prometheusSD      string
	dryRun            bool
	removeOnUnhealthy bool
	debounce          time.Duration
	pollInterval      time.Duration
	shutdownTimeout   time.Duration
	drainGrace        time.Duration
	region, zone      string
	resync            time.Duration
	metricsListen     string
	ui                bool
	discovery         discoveryFlags
	pods              podFlags
	tracing           *tracingFlags
}

func newAgentCmd(a *app) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Register this node's endpoints while healthy, and render discovery files",
		Long: `Run the per-node agent.

With --manifest it registers the manifest's entries while their health checks pass,
re-publishes them before their TTL runs out, removes an entry as soon as a check fails
(unless --remove-on-unhealthy=false), and removes everything it registered on SIGTERM:
first it publishes its entries again as draining, so that xDS and DNS clients send
them no new work, and waits --drain-grace (a second SIGTERM cuts the wait short).
--region and --zone place the node: every entry that names neither a region nor a
zone of its own is published in them; one that names only its region, the node's,
takes the node's zone; one that names a zone takes no region from the node.
Without --registry-backend it runs with a no-op publisher: the same manifest works on
nodes with and without a registry.

With --cni-socket it registers the node's Kubernetes pods: the CNI plugin
(switchboard cni, chained last in the node's CNI configuration) hands each new pod
to the agent, which records it on disk (--cni-state-dir) and registers its named
container ports while the pod is Ready, in --pod-cluster, with this node as owner.
It reads the node's pods from the Kubernetes API (--kubeconfig, or in-cluster) to
find their services and to remove what a lost DEL left behind (docs/kubernetes.md).

With --render and --prometheus-sd it keeps files current from the registry: Go
text/template files rendered with registrations CLUSTER PROTOCOL SERVICE IP (empty or
"*" matches any), and Prometheus file_sd JSON. Files are written atomically and only
when their content changes; a failing template keeps the last good output.

With --xds-listen it serves the registry to Envoy and proxyless gRPC clients over xDS
(one cluster per service and protocol, a listener per service for xds:///SERVICE),
and with --dns-listen it answers A, AAAA and SRV questions about it (--dns-domain).
--xds-tls-cert, --xds-tls-key and --xds-tls-client-ca (or --xds-spiffe-socket) serve
xDS over mTLS; a server that listens beyond loopback without client certificates (DNS
has none) is warned about at start.

SIGHUP reloads the manifest and templates. Metrics and /healthz are served on
--metrics-listen, and so is the agent's read-only web page, /ui: the entries and
their health checks, the publish gate, rendered files and discovery clients, kept
live (--ui=false turns it off).`,
		Example: `  switchboard agent --manifest /etc/switchboard/agent.yaml \
    --registry-backend jetstream --nats-url nats://nats:4222 \
    --render /etc/nginx/upstream.tmpl:/etc/nginx/conf.d/upstream.conf:"nginx -s reload" \
    --prometheus-sd /etc/prometheus/targets/switchboard.json`,
		Args: cobra.NoArgs,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.manifest, "manifest", "", "YAML manifest of the entries to register (top-level entries: list)")
	fl.StringArrayVar(&f.renders, "render", nil, "TEMPLATE:OUT[:COMMAND]: keep OUT rendered from TEMPLATE, run COMMAND (sh -c) after each change (repeatable)")
	fl.StringVar(&f.prometheusSD, "prometheus-sd", "", "keep this Prometheus file_sd JSON file current")
	fl.BoolVar(&f.dryRun, "dry-run", false, "run checks and the publish gate but write nothing to the registry")
	fl.BoolVar(&f.removeOnUnhealthy, "remove-on-unhealthy", true, "remove an entry at once when a check fails (false: stop refreshing and let its TTL expire)")
	fl.DurationVar(&f.debounce, "debounce", 250*time.Millisecond, "gather registry changes for this long before rendering")
	fl.DurationVar(&f.pollInterval, "poll-interval", 10*time.Second, "how often to list a registry backend that has no change feed")
	fl.DurationVar(&f.resync, "resync-interval", 5*time.Minute, "re-publish entries without a TTL this often while healthy, in case the registry lost them")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 5*time.Second, "how long removing the entries may take on shutdown")
	fl.DurationVar(&f.drainGrace, "drain-grace", defaultDrainGrace, "on SIGTERM, keep the entries published as draining this long before removing them; a second SIGTERM cuts it short (0: remove at once)")
	fl.StringVar(&f.region, "region", "", "the node's region, given to every entry that names neither region nor zone (a name, like a service's)")
	fl.StringVar(&f.zone, "zone", "", "the node's zone, given to every entry that names no zone and no other region (a name, like a service's)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9102", "address serving /metrics, /healthz and /readyz (empty: off)")
	fl.BoolVar(&f.ui, "ui", true, "serve the agent's read-only web page at /ui, beside /metrics")
	f.discovery.register(fl)
	f.pods.register(fl)
	f.tracing = addTracingFlags(cmd)
	_ = cmd.MarkFlagFilename("manifest", "yaml", "yml")
	bf := addBackendFlags(cmd, "")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runAgent(cmd.Context(), a, bf, f) }
	return cmd
}

func runAgent(ctx context.Context, a *app, bf *backendFlags, f agentFlags) error {
	// Signals count from here, before anything that may take time (tracing, the
	// registry's dial, the discovery servers): a first SIGTERM during any of them
	// still counts, and the second then cuts the grace period short.
	skip, stopSkip := secondSignal()
	defer stopSkip()
	if err := f.validate(); err != nil {
		return err
	}
	cfg := agent.Config{
		ManifestPath: f.manifest,
		Agent: agent.Options{DryRun: f.dryRun, KeepWhenUnhealthy: !f.removeOnUnhealthy, ShutdownTimeout: f.shutdownTimeout, Resync: f.resync,
			Region: f.region, Zone: f.zone, DrainGrace: f.drainGrace},
		Discovery: agent.DiscoveryOptions{Debounce: f.debounce, PollInterval: f.pollInterval},
		UI:        agent.UIOptions{Disabled: !f.ui},
		Logger:    a.logger(),
	}
	var err error
	stopTracing, err := f.tracing.start(ctx, cfg.Logger, "switchboard-agent") // before the registry client dials
	if err != nil {
		return err
	}
	defer stopTracing() // after the agent has removed its entries
	if f.manifest != "" {
		if cfg.Manifest, err = manifest.Load(f.manifest); err != nil {
			return usageError{err}
		}
	}
	if cfg.Outputs, err = f.outputs(); err != nil {
		return err
	}
	if bf.name == "" && (len(cfg.Outputs) > 0 || f.discovery.enabled()) {
		return usagef("--render, --prometheus-sd, --xds-listen and --dns-listen read the registry: set --registry-backend")
	}
	f.discovery.region, f.discovery.zone = f.region, f.zone
	servers, release, err := f.discovery.servers(ctx, cfg.Logger)
	defer release()
	if err != nil {
		return err
	}
	cfg.Servers = servers
	if f.pods.enabled() {
		src, err := f.pods.source(cfg.Logger)
		if err != nil {
			return err
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	if bf.name != "" {
		r, err := bf.open(ctx, cfg.Logger)
		if err != nil {
			return err
		}
		defer r.Close()
		cfg.Registry = r
	}
	if f.metricsListen != "" {
		ln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		cfg.HTTP = ln
		cfg.Logger.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
		if f.ui {
			cfg.Logger.Info("serving the agent's page", "addr", "http://"+ln.Addr().String()+"/ui")
		}
	}
	reload := make(chan struct{}, 1)
	cfg.Reload = reload
	stop := forwardSignal(ctx, syscall.SIGHUP, reload)
	defer stop()
	cfg.Agent.SkipDrain = skip
	return agent.Run(ctx, cfg)
}

func (f agentFlags) validate() error {
	if err := checkListens("metrics-listen", f.metricsListen); err != nil {
		return err
	}
	switch {
	case f.manifest == "" && len(f.renders) == 0 && f.prometheusSD == "" && !f.discovery.enabled() && !f.pods.enabled():
		return usagef("nothing to do: give --manifest, --cni-socket, --render, --prometheus-sd, --xds-listen or --dns-listen")
	case f.debounce <= 0:
		return usagef("--debounce %s: must be positive", f.debounce)
	case f.pollInterval <= 0:
		return usagef("--poll-interval %s: must be positive", f.pollInterval)
	case f.resync <= 0:
		return usagef("--resync-interval %s: must be positive", f.resync)
	case f.shutdownTimeout <= 0:
		return usagef("--shutdown-timeout %s: must be positive", f.shutdownTimeout)
	case f.drainGrace < 0:
		return usagef("--drain-grace %s: must be 0 (no draining) or positive", f.drainGrace)
	}
	if err := f.validateLocality(); err != nil {
		return err
	}
	if err := f.pods.validate(); err != nil {
		return err
	}
	return f.discovery.validate()
}

// validateLocality checks --region and --zone as the entries' names are checked,
// before anything starts: a bad one would make every entry's write fail.
func (f agentFlags) validateLocality() error {
	for _, l := range []struct{ flag, value string }{{"region", f.region}, {"zone", f.zone}} {
		if l.value == "" {
			continue
		}
		if err := endpoint.ValidateName(l.flag, l.value); err != nil {
			return usagef("--%s: %v", l.flag, err)
		}
	}
	return nil
}

// outputs parses --render and --prometheus-sd; a template that does not parse is bad
// input, reported with its file and line before anything starts.
func (f agentFlags) outputs() ([]agent.Output, error) {
	var outs []agent.Output
	seen := map[string]bool{}
	for _, s := range f.renders {
		spec, err := render.ParseSpec(s)
		if err != nil {
			return nil, usageError{fmt.Errorf("--render: %w", err)}
		}
		if seen[spec.Out] {
			return nil, usagef("--render %s: %s is already an output", s, spec.Out)
		}
		seen[spec.Out] = true
		o, err := render.NewOutput(spec)
		if err != nil {
			return nil, usageError{fmt.Errorf("--render %s: %w", s, err)}
		}
		outs = append(outs, o)
	}
	if f.prometheusSD != "" {
		if seen[f.prometheusSD] {
			return nil, usagef("--prometheus-sd %s: already a --render output", f.prometheusSD)
		}
		outs = append(outs, &filesd.Output{Path: f.prometheusSD})
	}
	return outs, nil
}

// defaultDrainGrace is --drain-grace's default: long enough for xDS and DNS
// clients to hear of the draining (a push, a DNS TTL of a few seconds) and for most
// requests in flight to finish; short enough for a rolling restart.
const defaultDrainGrace = 5 * time.Second

// secondSignal returns a channel closed on the second SIGTERM or interrupt: main's
// signal.NotifyContext turns the first into the end of the command's context, and a
// second one cuts the agent's grace period short. Counting from the start (runAgent
// calls it first) needs no guess at which signal ended the context: in the binary
// only a signal does.
func secondSignal() (<-chan struct{}, func()) {
	sigs := make(chan os.Signal, 2)
	notifyStop(sigs)
	skip, done := make(chan struct{}), make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			select {
			case <-sigs:
			case <-done:
				return
			}
			if n == 2 {
				close(skip)
				return
			}
		}
	}()
	return skip, func() { signal.Stop(sigs); close(done) }
}

// notifyStop relays SIGTERM and interrupts to c (a test replaces it).
var notifyStop = func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

// forwardSignal turns sig into sends on ch until ctx ends or stop is called.
func forwardSignal(ctx context.Context, sig os.Signal, ch chan<- struct{}) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, sig)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		cancel()
		<-done
	}
}
