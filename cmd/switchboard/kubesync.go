package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/kubesync"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() { subcommands = append(subcommands, newKubeSyncCmd) }

// minResync is the shortest --resync: each one queues every service, so a shorter
// period only spins. (--import-ttl, the other period, is whole seconds already.)
const minResync = time.Second

// kubeSyncFlags are the flags of `switchboard kube-sync`.
type kubeSyncFlags struct {
	kubeconfig      string
	cluster         string
	exportNamespace string
	exportServices  []string
	exportOthers    bool
	importNamespace string
	importTTL       time.Duration
	resync          time.Duration
	metricsListen   string
	changed         func(name string) bool
}

func newKubeSyncCmd(a *app) *cobra.Command {
	var f kubeSyncFlags
	cmd := &cobra.Command{
		Use:   "kube-sync",
		Short: "Sync Kubernetes Services with the registry: export, import, or both",
		Long: `Keep a Kubernetes cluster's Services and the registry in line, in either
direction or both. Each direction is off unless its namespace is given.

Export (--export-namespace): every registry service matching --export-service
becomes a Service in that namespace, with EndpointSlices holding its addresses, so
plain pods reach other clusters' endpoints by name (web.NAMESPACE.svc) through
CoreDNS and kube-proxy. The Service has no selector, one port per protocol and
port (named after the protocol: http, grpc, or http-8443 when a protocol has
several), and the label app.kubernetes.io/managed-by=switchboard-kubesync. A
registry service whose name is not a valid Service name, or whose name a Service
of someone else's already has, is skipped with a warning: kube-sync never changes
or deletes an object without its label. Addresses no EndpointSlice may hold
(loopback, link-local, unspecified) are left out with a warning, and a service
left with none gets no Service; an IPv4-mapped IPv6 address is exported as IPv4.

Import (--import-namespace): every ready address and port of that namespace's
EndpointSlices is registered under this cluster (--cluster) and the Service's
name, with the protocol taken from the port's appProtocol, else its name
("http-web" is http, the Istio convention), else tcp or udp. Entries live for
--import-ttl and are renewed while the endpoint is there, so entries of a
kube-sync that stopped expire on their own.

Neither direction sends back what the other brought: export skips this
cluster's imported entries and import skips the slices export made. Run one
replica per cluster. It needs to get, list and watch Services and
EndpointSlices, and (for export) create, update and delete them.

/healthz, /readyz (ready once the Kubernetes caches are synced and the registry
has been read; not ready while import's registry writes have failed for longer
than --import-ttl) and /metrics are served on --metrics-listen. SIGTERM stops it;
what it wrote stays (exported objects until the next run, imported entries
until their TTL).`,
		Example: `  # other clusters' services as Services in namespace "mesh", from the in-cluster config
  switchboard kube-sync --cluster prod-eu --registry-backend registrar \
    --registrar-address registrar.switchboard:9443 --export-namespace mesh --export-only-other-clusters

  # this cluster's Services in namespace "shop" into the registry, using a kubeconfig
  switchboard kube-sync --kubeconfig ~/.kube/config --cluster prod-eu --registry-backend etcd \
    --etcd-endpoints etcd:2379 --import-namespace shop --export-namespace mesh --export-service 'web*'`,
		Args: cobra.NoArgs,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: the in-cluster service account)")
	fl.StringVar(&f.cluster, "cluster", "", "this Kubernetes cluster's name in the registry (required)")
	fl.StringVar(&f.exportNamespace, "export-namespace", "", "export registry services as Services into this namespace (empty: no export)")
	fl.StringArrayVar(&f.exportServices, "export-service", nil, `registry services to export, as a glob such as "web*" (repeatable; default "*", every service)`)
	fl.BoolVar(&f.exportOthers, "export-only-other-clusters", false, "export only other clusters' endpoints; this cluster's pods reach its own through their own Services")
	fl.StringVar(&f.importNamespace, "import-namespace", "", "register the ready endpoints of this namespace's Services (empty: no import)")
	fl.DurationVar(&f.importTTL, "import-ttl", kubesync.DefaultTTL, "TTL of imported entries, renewed every third of it (whole seconds)")
	fl.DurationVar(&f.resync, "resync", kubesync.DefaultResync, "sync every service again this often, even without a change (at least 1s)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9106", "address serving /metrics, /healthz and /readyz (empty: off)")
	_ = cmd.MarkFlagFilename("kubeconfig")
	bf := addBackendFlags(cmd, "")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f.changed = cmd.Flags().Changed
		if err := f.validate(bf.name); err != nil {
			return err
		}
		return runKubeSync(cmd.Context(), a, bf, f)
	}
	return cmd
}

// validate checks the flags before anything is opened; every mistake is bad usage.
func (f kubeSyncFlags) validate(backend string) error {
	if err := f.validateDirections(); err != nil {
		return err
	}
	switch {
	case f.cluster == "":
		return usagef("--cluster is required: this Kubernetes cluster's name in the registry")
	case backend == "":
		return usagef("--registry-backend is required (registrar, etcd, jetstream, …): the registry to sync with")
	case !knownBackend(backend):
		return usagef("--registry-backend %q: %v", backend, registry.ErrUnknownBackend)
	case backend == "memory":
		return usagef("--registry-backend memory: the memory backend lives and dies with this process, so nothing else would see what kube-sync syncs; use the registry your clusters share")
	case f.resync < minResync:
		return usagef("--resync %s: must be at least %s: each resync queues every service", f.resync, minResync)
	}
	if err := endpoint.ValidateName("cluster", f.cluster); err != nil {
		return usagef("--cluster: %v", err)
	}
	return checkListens("metrics-listen", f.metricsListen)
}

// validateDirections checks that at least one direction is on, and that no flag
// of a direction that is off was given (it would silently do nothing).
func (f kubeSyncFlags) validateDirections() error {
	if f.exportNamespace == "" && f.importNamespace == "" {
		return usagef("nothing to do: give --export-namespace (registry → Kubernetes), --import-namespace (Kubernetes → registry), or both")
	}
	if f.exportNamespace == "" {
		for _, fl := range []string{"export-service", "export-only-other-clusters"} {
			if f.changed(fl) {
				return usagef("--%s needs --export-namespace", fl)
			}
		}
	} else if err := kubesync.ValidateNamespace(f.exportNamespace); err != nil {
		return usagef("--export-namespace: %v", err)
	}
	for _, p := range f.exportServices {
		if err := kubesync.ValidatePattern(p); err != nil {
			return usagef("--export-service: %v", err)
		}
	}
	if f.importNamespace == "" {
		if f.changed("import-ttl") {
			return usagef("--import-ttl needs --import-namespace")
		}
		return nil
	}
	if err := kubesync.ValidateNamespace(f.importNamespace); err != nil {
		return usagef("--import-namespace: %v", err)
	}
	if err := kubesync.ValidateTTL(f.importTTL); err != nil {
		return usagef("--import-ttl: %v", err)
	}
	return nil
}

func knownBackend(name string) bool {
	_, err := registry.Lookup(name)
	return err == nil
}

func runKubeSync(ctx context.Context, a *app, bf *backendFlags, f kubeSyncFlags) error {
	log := a.logger()
	client, err := kubeClient(f.kubeconfig, "switchboard-kube-sync", log)
	if errors.Is(err, rest.ErrNotInCluster) {
		return usagef("not running in a Kubernetes pod: give --kubeconfig")
	}
	if err != nil {
		return err
	}
	if err := probeListens("metrics-listen", f.metricsListen); err != nil {
		return err
	}
	backend, err := bf.open(ctx, log)
	if err != nil {
		return err
	}
	defer backend.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c, ok := backend.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	s, err := kubesync.New(f.config(client, backend, log, reg))
	if err != nil {
		return err
	}
	return runWithHealth(ctx, a, f, s, reg, log)
}

// config is the syncer's configuration from the flags.
func (f kubeSyncFlags) config(client kubernetes.Interface, backend registry.Registry, log *slog.Logger, reg prometheus.Registerer) kubesync.Config {
	cfg := kubesync.Config{Client: client, Registry: backend, Cluster: f.cluster, Resync: f.resync, Logger: log, Metrics: reg}
	if f.exportNamespace != "" {
		cfg.Export = &kubesync.ExportConfig{Namespace: f.exportNamespace, Services: f.exportServices, OnlyOtherClusters: f.exportOthers}
	}
	if f.importNamespace != "" {
		cfg.Import = &kubesync.ImportConfig{Namespace: f.importNamespace, TTL: f.importTTL}
	}
	return cfg
}

// runWithHealth serves /healthz, /readyz and /metrics while the syncer runs.
func runWithHealth(ctx context.Context, a *app, f kubeSyncFlags, s *kubesync.Syncer, reg *prometheus.Registry, log *slog.Logger) error {
	addr := "off"
	var srv *http.Server
	errc := make(chan error, 1)
	if f.metricsListen != "" {
		ln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			return addrInUse("metrics-listen", f.metricsListen, err)
		}
		addr = ln.Addr().String()
		srv = &http.Server{Handler: agent.Handler(reg, s.Ready), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info("kube-sync running", "cluster", f.cluster, "export_namespace", f.exportNamespace, "import_namespace", f.importNamespace, "metrics", addr)
	fmt.Fprintf(a.out, "kube-sync %s: export to %q, import from %q, health on %s\n", f.cluster, f.exportNamespace, f.importNamespace, addr)
	runErr := s.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) && runErr == nil {
			runErr = fmt.Errorf("--metrics-listen %s: %w", addr, err)
		}
	}
	return runErr
}
