package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/registrar"
)

func init() { subcommands = append(subcommands, newRegistrarCmd) }

// registrarFlags are the flags of `switchboard registrar`.
type registrarFlags struct {
	cluster       string
	alsoAccept    []string
	syncInterval  time.Duration
	backstop      time.Duration
	batchInterval time.Duration
	batchSize     int
	maxQueue      int
	history       int
	drainTimeout  time.Duration
	listen        string
	healthListen  string
	debugMemory   bool
	tlsCert       string
	tlsKey        string
	tlsClientCA   string
	spiffeSocket  string
	trustDomain   string
	nodePattern   string
	writePolicy   string
	anyWriter     bool
	insecure      bool
	listenGiven   bool
}

func newRegistrarCmd(a *app) *cobra.Command {
	var f registrarFlags
	cmd := &cobra.Command{
		Use:   "registrar",
		Short: "Run the in-cluster registrar between agents and the registry backend",
		Long: `Run one registrar replica. Agents (--registry-backend registrar) write their
endpoints through it and watch every cluster's endpoints from its in-memory
snapshot; it persists writes to the registry backend in batches and keeps the
snapshot in sync by polling the backend and following its change feed.

Replicas are independent: run two or more per cluster behind one address. On
SIGINT or SIGTERM the registrar stops taking writes, ends watch streams (agents
move to another replica) and persists every queued write before it exits.`,
		Example: `  switchboard registrar --cluster-name prod-eu --registry-backend etcd --etcd-endpoints etcd:2379
  switchboard registrar --cluster-name prod-eu --registry-backend jetstream --nats-url nats://nats:4222 \
    --spiffe-socket unix:///run/spire/agent.sock`,
		Args: cobra.NoArgs,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster-name", "", "the cluster this registrar accepts writes for (required)")
	fl.StringSliceVar(&f.alsoAccept, "accept-cluster", nil, `further clusters to accept writes for, "*" for any (single-machine setups)`)
	fl.DurationVar(&f.syncInterval, "sync-interval", 5*time.Second, "how often the whole backend is listed while it has no live change feed")
	fl.DurationVar(&f.backstop, "backstop-interval", time.Minute, "how often the whole backend is listed while its change feed (etcd, JetStream) is live: a backstop for what the feed may miss")
	fl.DurationVar(&f.batchInterval, "write-batch-interval", 100*time.Millisecond, "longest a write waits before its batch is persisted")
	fl.IntVar(&f.batchSize, "write-batch-size", 50, "persist a batch as soon as this many writes wait")
	fl.IntVar(&f.maxQueue, "max-queue", 65536, "most writes waiting to be persisted; beyond it writes are refused (RESOURCE_EXHAUSTED)")
	fl.IntVar(&f.history, "history-size", 16384, "recent changes kept for resuming agents; one further behind gets a full snapshot")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 10*time.Second, "how long shutdown keeps trying to persist queued writes")
	fl.StringVar(&f.listen, "listen", ":9443", "gRPC listen address; without TLS, 127.0.0.1 unless --insecure")
	fl.StringVar(&f.healthListen, "health-listen", ":8081", `HTTP address for /healthz, /readyz and /metrics ("" disables)`)
	fl.BoolVar(&f.debugMemory, "debug-memory", false, "also serve GET /debug/memory on the health address: heap and goroutine stacks after a forced GC, and the open watch streams (each call runs a full GC)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "server certificate (PEM); enables TLS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "server key (PEM)")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "CA bundle (PEM) agents' certificates must chain to: requires mTLS")
	fl.StringVar(&f.spiffeSocket, "spiffe-socket", "", "SPIFFE Workload API socket, e.g. unix:///run/spire/agent.sock: mTLS with SVIDs")
	fl.StringVar(&f.trustDomain, "authorized-trust-domain", "", "SPIFFE trust domain agents must belong to (default with --spiffe-socket: our own)")
	fl.StringVar(&f.nodePattern, "node-identity-pattern", registrar.DefaultNodePattern,
		"with mTLS: regular expression whose group \"node\" takes an agent's node from its identity (SPIFFE ID or URI, DNS name, common name); an agent writes only its node's endpoints")
	fl.StringVar(&f.writePolicy, "write-policy", "", "with mTLS: YAML file granting identities whole services or clusters, and naming who may read (see docs/security.md)")
	fl.BoolVar(&f.anyWriter, "allow-any-writer", false, "with mTLS: let every authenticated identity write any endpoint (no per-node rule)")
	fl.BoolVar(&f.insecure, "insecure", false, "allow plaintext gRPC on a non-loopback --listen address (without TLS the registrar cannot tell agents apart)")
	bf := addBackendFlags(cmd, "memory")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if f.cluster == "" {
			return usagef("--cluster-name is required")
		}
		if bf.name == "registrar" {
			return usagef("--registry-backend registrar: a registrar needs an external registry, not another registrar")
		}
		if err := checkListens("listen", f.listen, "health-listen", f.healthListen); err != nil {
			return err
		}
		f.listenGiven = cmd.Flags().Changed("listen")
		return runRegistrar(cmd.Context(), a, bf, f)
	}
	return cmd
}

func runRegistrar(ctx context.Context, a *app, bf *backendFlags, f registrarFlags) error {
	log := a.logger()
	tlsConf, closeTLS, err := registrarTLS(ctx, f)
	if err != nil {
		return err
	}
	defer closeTLS()
	if tlsConf == nil {
		if f.listen, err = plaintextListen("listen", f.listen, f.listenGiven, f.insecure); err != nil {
			return err
		}
		if !isLoopbackAddr(f.listen) {
			log.Warn(insecureWarning(f.listen))
		}
	}
	authz, err := registrarAuthorizer(f, tlsConf)
	if err != nil {
		return err
	}
	backend, err := bf.open(ctx, log)
	if err != nil {
		return err
	}
	defer backend.Close()
	srv, err := registrar.NewServer(registrar.ServerConfig{
		Listen: f.listen, HealthListen: f.healthListen, DebugMemory: f.debugMemory, TLS: tlsConf,
		Registrar: registrar.Config{
			Cluster: f.cluster, AlsoAccept: f.alsoAccept, Backend: backend,
			SyncInterval: f.syncInterval, BackstopInterval: f.backstop, BatchInterval: f.batchInterval, BatchSize: f.batchSize,
			MaxQueue: f.maxQueue, History: f.history, DrainTimeout: f.drainTimeout, Logger: log, Authorizer: authz,
		},
	})
	if err != nil {
		return err
	}
	health := "off"
	if h := srv.HealthAddr(); h != nil {
		health = h.String()
	}
	log.Info("registrar listening", "grpc", srv.Addr().String(), "health", health, "backend", bf.name, "tls", tlsConf != nil)
	if _, err := fmt.Fprintf(a.out, "registrar %s: gRPC on %s, health on %s\n", f.cluster, srv.Addr(), health); err != nil {
		return err
	}
	return srv.Run(ctx)
}

// registrarAuthorizer builds the write policy: with mTLS, each agent writes its own
// node's endpoints unless --allow-any-writer; without mTLS there is no identity to
// check (and the registrar listens on loopback unless --insecure).
func registrarAuthorizer(f registrarFlags, tlsConf *tls.Config) (*registrar.Authorizer, error) {
	// Client certificates are required and checked: by the CA pool, or by the
	// SPIFFE verifier (which asks for any certificate and verifies it itself).
	mtls := tlsConf != nil && (tlsConf.ClientAuth == tls.RequireAnyClientCert || tlsConf.ClientAuth == tls.RequireAndVerifyClientCert)
	switch {
	case !mtls && (f.writePolicy != "" || f.anyWriter):
		return nil, usagef("--write-policy and --allow-any-writer need mTLS: without client certificates there is no identity to authorize")
	case !mtls || f.anyWriter:
		return nil, nil
	}
	var policy *registrar.Policy
	if f.writePolicy != "" {
		p, err := registrar.LoadPolicy(f.writePolicy)
		if err != nil {
			return nil, usageError{fmt.Errorf("--write-policy: %w", err)}
		}
		policy = p
	}
	a, err := registrar.NewAuthorizer(f.nodePattern, policy)
	if err != nil {
		return nil, usageError{fmt.Errorf("--node-identity-pattern: %w", err)}
	}
	return a, nil
}

// registrarTLS builds the server's TLS from the flags: SVIDs from the Workload API,
// or certificate files, or none.
func registrarTLS(ctx context.Context, f registrarFlags) (*tls.Config, func(), error) {
	files := tlsutil.Files{CA: f.tlsClientCA, Cert: f.tlsCert, Key: f.tlsKey}
	noop := func() {}
	switch {
	case f.spiffeSocket != "" && files != (tlsutil.Files{}):
		return nil, noop, usagef("--spiffe-socket and --tls-* files are alternatives: use one")
	case f.spiffeSocket != "":
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		src, err := tlsutil.NewSource(sctx, f.spiffeSocket)
		if err != nil {
			return nil, noop, err
		}
		conf, err := src.ServerConfig(f.trustDomain)
		if err != nil {
			_ = src.Close()
			return nil, noop, usageError{fmt.Errorf("--authorized-trust-domain: %w", err)}
		}
		return conf, func() { _ = src.Close() }, nil
	case files != (tlsutil.Files{}):
		conf, err := tlsutil.ServerConfig(files, f.trustDomain)
		if err != nil {
			return nil, noop, usageError{fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)}
		}
		return conf, noop, nil
	case f.trustDomain != "":
		return nil, noop, usageError{errors.New("--authorized-trust-domain needs mTLS: set --spiffe-socket or --tls-cert, --tls-key and --tls-client-ca")}
	}
	return nil, noop, nil
}
