package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/loopback"
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
	livenessTTL   time.Duration
	hold          string
	listen        string
	healthListen  string
	debugMemory   bool
	ui            bool
	uiHistory     int
	tlsCert       string
	tlsKey        string
	tlsClientCA   string
	spiffeSocket  string
	trustDomain   string
	identityFrom  string
	nodePattern   string
	writePolicy   string
	anyWriter     bool
	insecure      bool
	listenGiven   bool
	tracing       *tracingFlags
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
	fl.DurationVar(&f.livenessTTL, "liveness-ttl", 20*time.Second,
		"keep agents' entries alive while their watch stream is open, writing each to the backend once instead of at every refresh (etcd, JetStream, DynamoDB, memory); "+
			"the time a dead replica's agents have to re-home before its entries go. 0: agents' refreshes reach the backend")
	fl.StringVar(&f.hold, "hold", registrar.HoldAll,
		"what this replica keeps in memory: all (every cluster's endpoints) or demanded (its own cluster's, and of the others only the services "+
			"its agents' scoped watches ask for; the first watcher of such a service waits for one backend read, full watches see only what is held)")
	fl.StringVar(&f.listen, "listen", ":9443", "gRPC listen address; without TLS, 127.0.0.1 unless --insecure")
	fl.StringVar(&f.healthListen, "health-listen", "127.0.0.1:8081", `HTTP address for /healthz, /readyz, /metrics and the web page /ui ("" disables)`)
	fl.BoolVar(&f.ui, "ui", true, "serve the read-only web page at /ui on the health address: endpoints, watchers and their lag, the backend's sync (docs/registrar.md, \"Web page\")")
	fl.IntVar(&f.uiHistory, "ui-history", 10000, "changes the web page keeps for the endpoints' history (1 to 1,000,000)")
	fl.BoolVar(&f.debugMemory, "debug-memory", false, "also serve GET /debug/memory on the health address: heap and goroutine stacks after a forced GC, and the open watch streams (each call runs a full GC)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "server certificate (PEM); enables TLS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "server key (PEM)")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "CA bundle (PEM) agents' certificates must chain to: requires mTLS")
	fl.StringVar(&f.spiffeSocket, "spiffe-socket", "", "SPIFFE Workload API socket, e.g. unix:///run/spire/agent.sock: mTLS with SVIDs")
	fl.StringVar(&f.trustDomain, "authorized-trust-domain", "",
		"SPIFFE trust domain agents must belong to (default: with --spiffe-socket our own; with --tls-client-ca the one the CA certificate names)")
	fl.StringVar(&f.identityFrom, "identity-from", string(registrar.IdentitySPIFFE),
		"with mTLS: what in an agent's certificate is its identity: spiffe (its SPIFFE ID, of the trust domain), dns (its first DNS SAN, as dns:NAME) or cn (its common name, as cn:NAME)")
	fl.StringVar(&f.nodePattern, "node-identity-pattern", registrar.DefaultNodePattern,
		"with mTLS: regular expression whose group \"node\" takes an agent's node from its identity (the SPIFFE ID, or the DNS name or common name); an agent writes only its node's endpoints")
	fl.StringVar(&f.writePolicy, "write-policy", "", "with mTLS: YAML file granting identities whole services or clusters, and naming who may read (see docs/security.md)")
	fl.BoolVar(&f.anyWriter, "allow-any-writer", false, "with mTLS: let every authenticated identity write any endpoint (no per-node rule)")
	fl.BoolVar(&f.insecure, "insecure", false, "allow plaintext gRPC, or TLS without client certificates, on a non-loopback --listen address (the registrar then cannot tell agents apart)")
	f.tracing = addTracingFlags(cmd)
	bf := addBackendFlags(cmd, "memory")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if f.cluster == "" {
			return usagef("--cluster-name is required")
		}
		if bf.name == "registrar" {
			return usagef("--registry-backend registrar: a registrar needs an external registry, not another registrar")
		}
		// The page's ring is allocated whole when it starts.
		if f.ui && (f.uiHistory < 1 || f.uiHistory > maxUIHistory) {
			return usagef("--ui-history %d: must be 1 to %d", f.uiHistory, maxUIHistory)
		}
		if err := checkListens("listen", f.listen, "health-listen", f.healthListen); err != nil {
			return err
		}
		if err := f.tracing.validate(); err != nil {
			return err
		}
		from, err := registrar.ParseIdentitySource(f.identityFrom)
		if err != nil {
			return usagef("--identity-from: %v", err)
		}
		f.identityFrom = string(from)
		f.listenGiven = cmd.Flags().Changed("listen")
		return runRegistrar(cmd.Context(), a, bf, f)
	}
	return cmd
}

// maxUIHistory bounds --ui-history: a change the page keeps costs up to 3 KB
// (docs/registrar.md, "Web page").
const maxUIHistory = 1_000_000

func runRegistrar(ctx context.Context, a *app, bf *backendFlags, f registrarFlags) error {
	log := a.logger()
	// Before the gRPC server is made, which takes its tracing options then; the
	// deferred stop runs after the server's graceful shutdown has persisted the
	// queued writes, so their batches' spans are flushed too.
	stopTracing, err := f.tracing.start(ctx, log, "switchboard-registrar")
	if err != nil {
		return err
	}
	defer stopTracing()
	st, err := registrarTLS(ctx, log, f)
	if err != nil {
		return err
	}
	defer st.close()
	if f.listen, err = registrarListen(log, f, st.conf); err != nil {
		return err
	}
	authz, err := registrarAuthorizer(f, st)
	if err != nil {
		return err
	}
	backend, err := bf.open(ctx, log)
	if err != nil {
		return err
	}
	defer backend.Close()
	srv, err := registrar.NewServer(registrar.ServerConfig{
		Listen: f.listen, HealthListen: f.healthListen, DebugMemory: f.debugMemory, TLS: st.conf,
		NoUI: !f.ui, UI: registrar.UIOptions{History: f.uiHistory, Logger: log},
		Registrar: registrar.Config{
			Cluster: f.cluster, AlsoAccept: f.alsoAccept, Backend: backend,
			SyncInterval: f.syncInterval, BackstopInterval: f.backstop, BatchInterval: f.batchInterval, BatchSize: f.batchSize,
			MaxQueue: f.maxQueue, History: f.history, DrainTimeout: f.drainTimeout, LivenessTTL: f.livenessTTL, Hold: f.hold, Logger: log, Authorizer: authz,
		},
	})
	if err != nil {
		return err
	}
	health := "off"
	if h := srv.HealthAddr(); h != nil {
		health = h.String()
	}
	log.Info("registrar listening", "grpc", srv.Addr().String(), "health", health, "backend", bf.name, "tls", st.conf != nil)
	if _, err := fmt.Fprintf(a.out, "registrar %s: gRPC on %s, health on %s\n", f.cluster, srv.Addr(), health); err != nil {
		return err
	}
	return srv.Run(ctx)
}

// registrarListen applies the rule that a registrar that cannot tell its callers
// apart serves loopback only: without client certificates, anyone who reaches the
// port could register or remove any node's endpoints. In plaintext an address the
// user did not give becomes its loopback form; with TLS, whose user means to serve
// beyond the machine, such an address is refused rather than moved.
func registrarListen(log *slog.Logger, f registrarFlags, conf *tls.Config) (string, error) {
	if conf == nil {
		addr, err := plaintextListen("listen", f.listen, f.listenGiven, f.insecure)
		if err == nil && !loopback.Addr(addr) {
			log.Warn(insecureWarning(addr))
		}
		return addr, err
	}
	if clientAuth(conf) || loopback.Addr(f.listen) {
		return f.listen, nil
	}
	if !f.insecure {
		return "", usagef("--listen %s: TLS without client certificates (--tls-cert/--tls-key without --tls-client-ca) on a non-loopback address: "+
			"the registrar cannot tell agents apart, so anyone who reaches it could register or remove any node's endpoints; "+
			"require client certificates with --tls-client-ca or --spiffe-socket, listen on 127.0.0.1, or accept the risk with --insecure", f.listen)
	}
	log.Warn(fmt.Sprintf("serving TLS without client certificates on %s (--insecure): any client that reaches it can register and remove any node's endpoints", f.listen))
	return f.listen, nil
}

// clientAuth reports whether conf makes every client present a certificate that is
// checked: by the CA pool, or by the SPIFFE verifier (which asks for any
// certificate and verifies it itself).
func clientAuth(conf *tls.Config) bool {
	return conf != nil && (conf.ClientAuth == tls.RequireAnyClientCert || conf.ClientAuth == tls.RequireAndVerifyClientCert)
}

// registrarAuthorizer builds the write policy: with mTLS, each agent writes its own
// node's endpoints unless --allow-any-writer; without mTLS there is no identity to
// check (and the registrar listens on loopback unless --insecure).
func registrarAuthorizer(f registrarFlags, st serverTLS) (*registrar.Authorizer, error) {
	mtls := clientAuth(st.conf)
	switch {
	case !mtls && (f.writePolicy != "" || f.anyWriter || f.identityFrom != string(registrar.IdentitySPIFFE)):
		return nil, usagef("--write-policy, --allow-any-writer and --identity-from need mTLS: without client certificates there is no identity to authorize")
	case f.anyWriter && f.writePolicy != "":
		// Either would silently drop the other's rules, the policy's readers included.
		return nil, usagef("--allow-any-writer and --write-policy are alternatives: every identity writes everything, or the policy says who writes and reads what")
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
	a, err := registrar.NewAuthorizer(registrar.AuthorizerConfig{
		IdentityFrom: registrar.IdentitySource(f.identityFrom), TrustDomain: st.trustDomain,
		NodePattern: f.nodePattern, Policy: policy,
	})
	if err != nil {
		return nil, usageError{fmt.Errorf("--node-identity-pattern, --identity-from, --authorized-trust-domain: %w", err)}
	}
	return a, nil
}

// serverTLS is the gRPC server's TLS, and the SPIFFE trust domain its clients are
// held to ("" when they are not).
type serverTLS struct {
	conf        *tls.Config
	trustDomain string
	close       func()
}

// registrarTLS builds the server's TLS from the flags: SVIDs from the Workload API,
// or certificate files, or none. With client certificates it logs whom it accepts.
func registrarTLS(ctx context.Context, log *slog.Logger, f registrarFlags) (serverTLS, error) {
	files := tlsutil.Files{CA: f.tlsClientCA, Cert: f.tlsCert, Key: f.tlsKey}
	var (
		st  serverTLS
		err error
	)
	switch {
	case f.spiffeSocket != "" && files != (tlsutil.Files{}):
		err = usagef("--spiffe-socket and --tls-* files are alternatives: use one")
	case f.spiffeSocket != "":
		st, err = spiffeTLS(ctx, f)
	case files != (tlsutil.Files{}):
		st, err = filesTLS(log, f, files)
	case f.trustDomain != "":
		err = usageError{errors.New("--authorized-trust-domain needs mTLS: set --spiffe-socket or --tls-cert, --tls-key and --tls-client-ca")}
	}
	if st.close == nil {
		st.close = func() {}
	}
	if err == nil && clientAuth(st.conf) {
		log.Info("registrar requires client certificates", "identity_from", f.identityFrom, "trust_domain", st.trustDomain, "node_identity_pattern", f.nodePattern)
	}
	return st, err
}

func spiffeTLS(ctx context.Context, f registrarFlags) (serverTLS, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	src, err := tlsutil.NewSource(sctx, f.spiffeSocket)
	if err != nil {
		return serverTLS{}, err
	}
	conf, err := src.ServerConfig(f.trustDomain)
	if err != nil {
		_ = src.Close()
		return serverTLS{}, usageError{fmt.Errorf("--authorized-trust-domain: %w", err)}
	}
	td := f.trustDomain
	if td == "" {
		td = src.TrustDomain().Name()
	}
	return serverTLS{conf: conf, trustDomain: td, close: func() { _ = src.Close() }}, nil
}

func filesTLS(log *slog.Logger, f registrarFlags, files tlsutil.Files) (serverTLS, error) {
	td, err := filesTrustDomain(log, f)
	if err != nil {
		return serverTLS{}, err
	}
	conf, err := tlsutil.ServerConfig(files, td)
	if err != nil {
		return serverTLS{}, usageError{fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)}
	}
	return serverTLS{conf: conf, trustDomain: td}, nil
}

// filesTrustDomain is the trust domain clients of a file-based mTLS registrar must
// belong to: --authorized-trust-domain, else, when identities are SPIFFE IDs, the
// one the client CA's certificate names. A CA may sign for several trust domains,
// and an agent's node is read from its ID's path alone, so without a trust domain
// spiffe://other.org/agent/node-1 would act as node-1.
func filesTrustDomain(log *slog.Logger, f registrarFlags) (string, error) {
	if f.trustDomain != "" || f.tlsClientCA == "" || f.identityFrom != string(registrar.IdentitySPIFFE) || f.anyWriter {
		// With --allow-any-writer no identity is mapped to a node: any the CA signed
		// may write, as before.
		return f.trustDomain, nil
	}
	td, err := tlsutil.BundleTrustDomain(f.tlsClientCA)
	if errors.Is(err, tlsutil.ErrNoTrustDomain) {
		return "", usagef("--tls-client-ca %s: agents' identities are SPIFFE IDs, and the CA certificate names no trust domain (no spiffe:// URI SAN): "+
			"name it with --authorized-trust-domain, or take identities from DNS names or common names with --identity-from dns|cn", f.tlsClientCA)
	}
	if err != nil {
		return "", usageError{fmt.Errorf("--tls-client-ca: %w; name the trust domain with --authorized-trust-domain", err)}
	}
	log.Info("trust domain taken from the client CA certificate (--authorized-trust-domain to choose another)", "trust_domain", td.Name(), "ca", f.tlsClientCA)
	return td.Name(), nil
}
