package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/registry"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "jetstream",
		Description: "NATS JetStream stream used as a KV store (TTLs, delete markers, watch)",
		Params:      append(connParams(), streamParams()...),
		Open: func(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
			d, err := open(ctx, cfg)
			if err != nil {
				return nil, err // not a typed nil inside the interface
			}
			return d, nil
		},
		// `switchboard registry init`: create or update the stream.
		Init: func(ctx context.Context, cfg registry.Config) error {
			_, err := Init(ctx, cfg)
			return err
		},
		Plan: Plan,
	})
	registry.RegisterBackend(registry.Backend{
		Name:        "nats",
		Description: "best-effort core NATS publish (no TTL, no rollup, no acks); write-only",
		Params:      connParams(),
		Open: func(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
			p, err := openPublisher(cfg)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
	})
}

// Parameter names; commands expose each as a flag of the same name.
const (
	ParamURL          = "nats-url"
	ParamCreds        = "nats-creds"
	ParamTLSCA        = "nats-tls-ca"
	ParamTLSCert      = "nats-tls-cert"
	ParamTLSKey       = "nats-tls-key"
	ParamPrefix       = "subject-prefix"
	ParamStream       = "stream"
	ParamReplicas     = "replicas"
	ParamMaxAge       = "max-age"
	ParamStorage      = "storage"
	ParamMarkerTTL    = "marker-ttl"
	ParamCreateStream = "create-stream"
	ParamLookup       = "lookup"
	ParamWatchRescan  = "watch-rescan"
)

func connParams() []registry.Param {
	return []registry.Param{
		{Name: ParamURL, Default: nats.DefaultURL, Usage: "NATS server URL(s), comma-separated"},
		{Name: ParamCreds, Usage: "NATS credentials file (JWT + nkey)"},
		{Name: ParamTLSCA, Usage: "CA bundle to verify the NATS server"},
		{Name: ParamTLSCert, Usage: "client certificate for NATS mTLS (with " + ParamTLSKey + ")"},
		{Name: ParamTLSKey, Usage: "client key for NATS mTLS (with " + ParamTLSCert + ")"},
		{Name: ParamPrefix, Default: DefaultPrefix, Usage: "subject prefix of registration entries"},
	}
}

func streamParams() []registry.Param {
	return []registry.Param{
		{Name: ParamStream, Default: DefaultStream, Usage: "JetStream stream holding the entries"},
		{Name: ParamReplicas, Default: "1", Usage: "stream replicas, 1..5 (when creating the stream)"},
		{Name: ParamMaxAge, Default: DefaultMaxAge.String(), Usage: "stream-wide expiry of entries without a TTL; 0 keeps them (when creating the stream)"},
		{Name: ParamStorage, Default: "file", Usage: "stream storage, file or memory (when creating the stream)"},
		{Name: ParamMarkerTTL, Default: DefaultMarkerTTL.String(), Usage: "how long delete markers stay visible to watchers; an unregister's removal lives at least this long, and as long as the entry it replaces could have"},
		{Name: ParamCreateStream, Default: "true", Usage: "create the stream if it does not exist"},
		{Name: ParamLookup, Default: LookupConsumer, Usage: "lookup strategy: consumer (a filtered lookup reads with multi_last direct get where the stream allows it, checked against the leader; the rest through a consumer) or direct (direct get only, any replica's view)"},
		{Name: ParamWatchRescan, Default: DefaultWatchRescan.String(), Usage: "how often a watch re-reads its entries to report those removed without a marker (another writer's purge) as removed; 0 turns it off"},
	}
}

// Open opens the jetstream backend from its parameters: it connects (the registry
// owns the connection) and checks or creates the stream.
func Open(ctx context.Context, cfg registry.Config) (*registry.Front, error) {
	return registry.Wrap("jetstream")(open(ctx, cfg))
}

func open(ctx context.Context, cfg registry.Config) (*driver, error) {
	cfg = withDefaults(cfg, append(connParams(), streamParams()...))
	o, err := options(cfg)
	if err != nil {
		return nil, err
	}
	nc, err := Connect(cfg)
	if err != nil {
		return nil, err
	}
	r, err := newDriver(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	r.ownConn = true
	return r, nil
}

// Init creates or updates the stream from the backend parameters (replicas, max-age,
// storage, marker-ttl): `switchboard registry init`.
func Init(ctx context.Context, cfg registry.Config) (*jetstream.StreamInfo, error) {
	cfg = withDefaults(cfg, append(connParams(), streamParams()...))
	o, err := options(cfg)
	if err != nil {
		return nil, err
	}
	nc, js, err := connectJS(cfg)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// What it changes is logged; a stream it cannot read is left to EnsureStream to
	// report.
	changes, _ := planStream(ctx, js, o.Stream)
	for _, c := range changes {
		cfg.Logger.Info("changing stream setting", "stream", o.Stream.Name, "change", c)
	}
	info, err := EnsureStream(ctx, js, o.Stream)
	return info, unavailable(deniedSince(nc, nil, err))
}

// Plan lists what Init would do to the stream, one line each, and changes nothing:
// `switchboard registry init --dry-run`, for a stream that someone else created.
func Plan(ctx context.Context, cfg registry.Config) ([]string, error) {
	cfg = withDefaults(cfg, append(connParams(), streamParams()...))
	o, err := options(cfg)
	if err != nil {
		return nil, err
	}
	nc, js, err := connectJS(cfg)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	changes, err := planStream(ctx, js, o.Stream)
	return changes, unavailable(deniedSince(nc, nil, err))
}

// connectJS connects for Init and Plan, which use the connection once.
func connectJS(cfg registry.Config) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Connect(cfg)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// planStream names what EnsureStream(cfg) would change: the stream's creation, or
// each setting of the existing stream that it would change.
func planStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) ([]string, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return []string{fmt.Sprintf("create stream %s on %s.>", cfg.Name, cfg.Prefix)}, nil
	case err != nil:
		return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	got := s.CachedInfo().Config
	changes := streamChanges(got, cfg.over(got))
	for i, c := range changes {
		if strings.HasPrefix(c, "storage:") {
			changes[i] += " (the server refuses this change: init will fail)"
		}
	}
	return changes, nil
}

// withDefaults fills parameters the caller left out, as registry.Open does, so Init
// and Open behave the same when called directly.
func withDefaults(cfg registry.Config, params []registry.Param) registry.Config {
	out := registry.Config{Params: map[string]string{}, Logger: cfg.Logger}
	for _, p := range params {
		out.Params[p.Name] = p.Default
	}
	for k, v := range cfg.Params {
		out.Params[k] = v
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func options(cfg registry.Config) (Options, error) {
	replicas, err := cfg.Int(ParamReplicas)
	if err != nil {
		return Options{}, err
	}
	maxAge, err := cfg.Duration(ParamMaxAge)
	if err != nil {
		return Options{}, err
	}
	markerTTL, err := cfg.Duration(ParamMarkerTTL)
	if err != nil {
		return Options{}, err
	}
	create, err := cfg.Bool(ParamCreateStream)
	if err != nil {
		return Options{}, err
	}
	rescan, err := cfg.Duration(ParamWatchRescan)
	switch {
	case err != nil:
		return Options{}, err
	case rescan < 0:
		return Options{}, fmt.Errorf("parameter %s: %s is negative (0 turns rescans off)", ParamWatchRescan, rescan)
	case rescan == 0:
		rescan = -1 // off; Options' zero means the default
	}
	storage := strings.ToLower(cfg.String(ParamStorage))
	if storage != "file" && storage != "memory" {
		return Options{}, fmt.Errorf("parameter %s: %q is neither file nor memory", ParamStorage, cfg.String(ParamStorage))
	}
	stream := StreamConfig{
		Name: cfg.String(ParamStream), Prefix: cfg.String(ParamPrefix), Replicas: replicas,
		MaxAge: maxAge, Memory: storage == "memory", MarkerTTL: markerTTL,
	}
	// Checked before connecting, so a bad value is reported as one whether or not
	// the server is up.
	if err := stream.withDefaults().validate(); err != nil {
		return Options{}, fmt.Errorf("%w: %v", registry.ErrBadParam, err)
	}
	return Options{
		Stream:       stream,
		CreateStream: create,
		Lookup:       cfg.String(ParamLookup),
		WatchRescan:  rescan,
		Logger:       cfg.Logger,
	}, nil
}

// pingInterval is how often the connection to a server pings it (see Connect).
const pingInterval = 5 * time.Second

// Connect dials NATS with the connection parameters. The connection reconnects for
// ever, logging each disconnect and reconnect.
func Connect(cfg registry.Config) (*nats.Conn, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name("switchboard"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// nats.go pings every 2 minutes and allows 2 unanswered: a server whose
		// path went silent (a partition; the server is fine) kept the connection
		// for up to 6 minutes, writes timing out and watches hearing nothing. A
		// ping every 5 s, 2 unanswered allowed, notices it within 15 s, and the
		// client reconnects to another server of the cluster.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("NATS async error", "error", err) }),
	}
	if creds := cfg.String(ParamCreds); creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if ca := cfg.String(ParamTLSCA); ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	cert, key := cfg.String(ParamTLSCert), cfg.String(ParamTLSKey)
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("parameters %s and %s must be given together", ParamTLSCert, ParamTLSKey)
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	url := cfg.String(ParamURL)
	if url == "" {
		return nil, errors.New("parameter " + ParamURL + " is empty")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to NATS at %s: %w", registry.ErrUnavailable, redactURLs(url), err)
	}
	return nc, nil
}

// redactURLs hides the passwords of a comma-separated list of NATS URLs, so that
// an error or a log line never carries one.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
