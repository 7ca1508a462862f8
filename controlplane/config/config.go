package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/internal/yamlpos"
)

// Config is the control plane's configuration file.
type Config struct {
	Tracing    Tracing
	Northbound Server
	Southbound Server
	// SendTimeout bounds one message to a node (`southbound.send_timeout`): a node
	// that stops reading is disconnected once it passes, instead of holding up
	// the reconcilers. 0 means the default (10 s).
	SendTimeout time.Duration
	Database    Database
	// Topology is nil in API mode: the section is absent, null or empty.
	Topology         *Topology
	RegistrationAuth RegistrationAuth
	Reconciler       Reconciler
	// Links are the settings injected into every cross-group link's client
	// configuration (docs/controlplane.md, "Configuration"); all optional.
	Links LinkSettings
	// NorthboundAuthorization binds callers of the northbound API to roles (the
	// `northbound.authorization` section). Empty leaves the API open, which
	// CheckListeners allows only on loopback unless AllowInsecureRemote is set.
	NorthboundAuthorization Authorization
	// AllowInsecureRemote (`allow_insecure_remote`, or the command's --insecure) lets a
	// plaintext endpoint, a northbound endpoint without authorization, or a
	// southbound endpoint without registration auth listen on a non-loopback address.
	AllowInsecureRemote bool
}

// Northbound roles, weakest first.
const (
	RoleViewer = "viewer"
	RoleAdmin  = "admin"
)

// Authorization is the `northbound.authorization` section.
type Authorization struct {
	// Identities maps a client-certificate identity to its role: "spiffe://…" (a URI
	// SAN; "uri:URI" for one of another form), "dns:NAME" (a DNS SAN) or "cn:NAME"
	// (the subject's common name). Each matches its own field only (ParseIdentity).
	Identities map[string]string
	// TokenFile holds the bearer tokens' hashes, one "ROLE NAME sha256:HEX" per line;
	// it is re-read on SIGHUP.
	TokenFile string
}

// Enabled reports whether any caller is bound to a role, which turns enforcement on.
func (a Authorization) Enabled() bool { return len(a.Identities) > 0 || a.TokenFile != "" }

// LinkSettings is the `links` section.
type LinkSettings struct {
	// SpireSocketPath is where source nodes get the SVID for mTLS to destinations that
	// require it.
	SpireSocketPath   string
	BackoffInitial    time.Duration
	BackoffMax        time.Duration
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
}

// Mode says where the topology comes from.
type Mode uint8

const (
	// APIMode: the database is the source of truth, managed through the API.
	APIMode Mode = iota
	// ConfigMode: the file is the source of truth, mutation APIs are refused.
	ConfigMode
)

func (m Mode) String() string {
	if m == ConfigMode {
		return "config"
	}
	return "api"
}

// Mode reports the topology mode the file selects.
func (c *Config) Mode() Mode {
	if c.Topology != nil {
		return ConfigMode
	}
	return APIMode
}

// Tracing configures logging.
type Tracing struct {
	LogLevel string // trace, debug, info, warn, error
}

// Level maps LogLevel to slog; trace is below debug.
func (t Tracing) Level() slog.Level {
	switch t.LogLevel {
	case "trace":
		return slog.LevelDebug - 4
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Server is one gRPC endpoint.
type Server struct {
	Endpoint string // host:port
	TLS      TLS
}

// TLS configures a server's transport security. Insecure defaults to true when no
// certificate is configured; CAFile turns on client certificate verification (mTLS).
type TLS struct {
	Insecure bool
	CertFile string
	KeyFile  string
	CAFile   string
}

// Database backend names.
const (
	DatabaseInMemory = "in_memory"
	DatabaseSQLite   = "sqlite"
	DatabaseEtcd     = "etcd"
)

// Database selects the store.
type Database struct {
	Type string
	Path string // sqlite only
	Etcd Etcd   // etcd only
}

// Topology is the config mode topology: an adjacency list, or segments that replace it.
type Topology struct {
	Links    []Link
	Segments []Segment
}

// Link says Group connects to each of Neighbors, both ways. Wildcard matches every
// registered group; GroupVar (segments only) stands for the group a segment is
// instantiated for.
type Link struct {
	Group     string
	Neighbors []string
}

// Segment is a routing domain with its own adjacency list. A Name containing GroupVar
// makes it a template instantiated once per registered group.
type Segment struct {
	Name  string
	Links []Link
}

// Registration auth types.
const (
	AuthNoop         = "noop"
	AuthSharedSecret = "shared_secret"
	AuthSpire        = "spire"
)

// MinSecretLen is the shortest shared secret accepted.
const MinSecretLen = 32

// RegistrationAuth configures how nodes prove group membership.
type RegistrationAuth struct {
	Type string
	// Secrets maps group to its shared secret (shared_secret).
	Secrets map[string]string
	// MaxTokenAge bounds how old a shared-secret token may be (shared_secret).
	MaxTokenAge time.Duration
	// SocketPath is the SPIRE agent's workload API socket (spire).
	SocketPath string
	// Audience is the JWT-SVID audience nodes request and the CP checks (spire).
	Audience string
}

// Enabled reports whether nodes must prove who they are to register (any type but
// noop).
func (a RegistrationAuth) Enabled() bool { return a.Type != "" && a.Type != AuthNoop }

// Reconciler tunes the link and route reconcilers.
type Reconciler struct {
	MaxRequeues           int
	BaseRetryDelay        time.Duration
	ReconcilePeriod       time.Duration // 0 disables the sweep
	EnableOrphanDetection bool
	Workers               int
}

// The endpoints' default ports. Without TLS an endpoint defaults to loopback; with TLS
// and no endpoint given, to every interface.
const (
	NorthboundPort = "50051"
	SouthboundPort = "50052"
)

// Default returns the configuration of an empty file.
func Default() *Config {
	return &Config{
		Tracing:          Tracing{LogLevel: "info"},
		Northbound:       Server{Endpoint: "127.0.0.1:" + NorthboundPort, TLS: TLS{Insecure: true}},
		Southbound:       Server{Endpoint: "127.0.0.1:" + SouthboundPort, TLS: TLS{Insecure: true}},
		Database:         Database{Type: DatabaseInMemory},
		RegistrationAuth: RegistrationAuth{Type: AuthNoop},
		Reconciler: Reconciler{
			MaxRequeues: 15, BaseRetryDelay: 200 * time.Millisecond, ReconcilePeriod: 60 * time.Second, Workers: 4,
		},
	}
}

// ErrInvalid is matched by every error Parse returns for a bad file.
var ErrInvalid = errors.New("invalid control plane config")

// FieldError names the key that broke a rule.
type FieldError struct {
	Path   string // e.g. "reconciler.base_retry_delay", "topology.links[0].neighbors[1]"
	Line   int
	Column int
	Msg    string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d, column %d: %s: %s", e.Line, e.Column, e.Path, e.Msg)
	}
	return e.Path + ": " + e.Msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control plane config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes one YAML document strictly: unknown keys, wrong types and invalid values
// are all reported, each as a *FieldError naming its key, joined into one error.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return Default(), nil
		}
		// yaml.v3 places many syntax errors at the top of their block.
		if at := yamlpos.Locate(data, err); at != nil {
			return nil, fmt.Errorf("%w: YAML: %v", ErrInvalid, at)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: the file must hold exactly one YAML document", ErrInvalid)
	}
	c := Default()
	d := &decoder{budget: maxNodes}
	d.config(docContent(&root), c)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return c, nil
}

func docContent(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return n.Content[0]
	}
	return n
}
