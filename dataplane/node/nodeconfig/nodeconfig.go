// Package nodeconfig reads the YAML file `switchboard node --config` runs from, and
// turns it into a node.Config. docs/dataplane.md describes every key.
package nodeconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/loopback"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/nodeauth"
	"github.com/switchboard-mesh/switchboard/registry"
)

// File is the node's configuration file.
type File struct {
	NodeID           string   `yaml:"node_id"`
	Group            string   `yaml:"group"`
	Listen           string   `yaml:"listen"`
	Endpoint         string   `yaml:"endpoint"`
	ExternalEndpoint string   `yaml:"external_endpoint"`
	HealthListen     string   `yaml:"health_listen"`
	ControlPlane     []string `yaml:"control_plane"`
	ControlPlaneTLS  TLS      `yaml:"control_plane_tls"`
	// TLS secures links and peerings (both the listener and the dialing side) and the
	// local client API, which share the listener.
	TLS          TLS          `yaml:"tls"`
	Registry     Registry     `yaml:"registry"`
	Registration Registration `yaml:"registration"`
	Limits       Limits       `yaml:"limits"`
	LinkGrace    Duration     `yaml:"link_grace"`
	// LinkTransport is how the node dials links and peerings: framed (the default)
	// or grpc, while some nodes of the fleet accept only gRPC.
	LinkTransport string `yaml:"link_transport"`
	// PeerIdentityPattern maps a peer node's SPIFFE ID to its group and node id (with
	// mTLS); empty: node.DefaultPeerIdentity.
	PeerIdentityPattern string `yaml:"peer_identity_pattern"`
	// AllowInsecureRemote lets the listener be plaintext on a non-loopback address
	// (CheckListen), as --insecure does.
	AllowInsecureRemote bool `yaml:"allow_insecure_remote"`
}

// TLS names PEM files, or a SPIFFE Workload API socket instead of them.
type TLS struct {
	CAFile       string `yaml:"ca_file"`
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ServerName   string `yaml:"server_name"`
	TrustDomain  string `yaml:"trust_domain"`
	SPIFFESocket string `yaml:"spiffe_socket"`
}

func (t TLS) empty() bool { return t == TLS{} }

// Registry chooses the backend the node registers in and finds its group through.
type Registry struct {
	Backend string            `yaml:"backend"`
	Params  map[string]string `yaml:"params"`
}

// Registration is the node's registration credentials toward the control plane.
type Registration struct {
	Type       string `yaml:"type"` // noop (default), shared_secret, spire
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
	SocketPath string `yaml:"socket_path"`
}

// Limits bound messages and queues; zero keeps the node's defaults.
type Limits struct {
	MaxMessageBytes    int    `yaml:"max_message_bytes"`
	QueueLen           int    `yaml:"queue_len"`
	SubscriberQueueLen int    `yaml:"subscriber_queue_len"`
	MaxHops            uint32 `yaml:"max_hops"`
	// SlowConsumer is what becomes of a local subscriber whose queue is full:
	// disconnect (default) or drop (node.SlowConsumerPolicy).
	SlowConsumer string `yaml:"slow_consumer"`
}

// Duration is a time.Duration written as "10s".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration like 10s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// ErrInvalid is matched by every error about the file's content.
var ErrInvalid = errors.New("invalid node config")

// Load reads and parses the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes one YAML document strictly (unknown keys are errors) and checks it.
func Parse(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if errs := f.check(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return &f, nil
}

func (f *File) check() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.NodeID == "" {
		bad("node_id is required")
	} else if err := endpoint.ValidateName("node_id", f.NodeID); err != nil {
		bad("node_id: %v", err)
	}
	if f.Group == "" {
		bad("group is required")
	} else if err := endpoint.ValidateName("group", f.Group); err != nil {
		bad("group: %v", err)
	}
	for key, addr := range map[string]string{"listen": f.Listen, "endpoint": f.Endpoint, "external_endpoint": f.ExternalEndpoint, "health_listen": f.HealthListen} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("%s %q: want host:port", key, addr)
		}
	}
	if f.Listen == "" {
		bad("listen is required")
	}
	for i, cp := range f.ControlPlane {
		if _, _, err := net.SplitHostPort(cp); err != nil {
			bad("control_plane[%d] %q: want host:port", i, cp)
		}
	}
	switch f.Registration.Type {
	case "", nodeauth.TypeNoop, nodeauth.TypeSPIRE:
	case nodeauth.TypeSharedSecret:
		if (f.Registration.Secret == "") == (f.Registration.SecretFile == "") {
			bad("registration: shared_secret needs exactly one of secret and secret_file")
		}
	default:
		bad("registration.type %q: want noop, shared_secret or spire", f.Registration.Type)
	}
	if f.Limits.MaxMessageBytes < 0 || f.Limits.QueueLen < 0 || f.Limits.SubscriberQueueLen < 0 {
		bad("limits must not be negative")
	}
	if _, err := node.ParseSlowConsumerPolicy(f.Limits.SlowConsumer); err != nil {
		bad("limits.%v", err)
	}
	for key, t := range map[string]TLS{"tls": f.TLS, "control_plane_tls": f.ControlPlaneTLS} {
		if (t.CertFile == "") != (t.KeyFile == "") {
			bad("%s: cert_file and key_file go together", key)
		}
		if t.SPIFFESocket != "" && (t.CertFile != "" || t.CAFile != "") {
			bad("%s: spiffe_socket replaces ca_file, cert_file and key_file", key)
		}
	}
	if !f.TLS.empty() && f.TLS.SPIFFESocket == "" && f.TLS.CertFile == "" {
		bad("tls: the listener needs cert_file and key_file (or spiffe_socket)")
	}
	if f.PeerIdentityPattern != "" {
		if _, err := node.ParsePeerIdentity(f.PeerIdentityPattern); err != nil {
			bad("peer_identity_pattern: %v", err)
		}
	}
	switch f.LinkTransport {
	case "", node.TransportFramed, node.TransportGRPC:
	default:
		bad("link_transport %q: want %s or %s", f.LinkTransport, node.TransportFramed, node.TransportGRPC)
	}
	return errs
}

// ErrInsecureListen is matched by CheckListen's error.
var ErrInsecureListen = errors.New("insecure listener")

// UnauthenticatedRemote reports whether the node would serve links, peerings and
// local clients beyond loopback without knowing who dials it: in plaintext, or with a
// server certificate but no client CA (ca_file) or SPIFFE socket to verify dialers
// by. Anyone who reaches the port could then join the group as any node, and publish
// and subscribe to anything.
func (f *File) UnauthenticatedRemote() bool {
	clientAuth := f.TLS.CAFile != "" || f.TLS.SPIFFESocket != ""
	return !clientAuth && !loopback.Addr(f.Listen)
}

// CheckListen refuses a listener beyond loopback that does not authenticate its
// dialers, unless AllowInsecureRemote says it is meant.
func (f *File) CheckListen() error {
	if !f.UnauthenticatedRemote() || f.AllowInsecureRemote {
		return nil
	}
	what := "plaintext"
	if !f.TLS.empty() {
		what = "TLS without client certificates (no ca_file or spiffe_socket)"
	}
	return fmt.Errorf("%w: listen %s is %s on a non-loopback address; configure mTLS (cert_file, key_file and ca_file, or spiffe_socket), listen on 127.0.0.1, or pass --insecure (allow_insecure_remote: true) to accept this",
		ErrInsecureListen, f.Listen, what)
}

// Resources are what Build opened; Close releases them.
type Resources struct {
	closers []func() error
}

// Close releases everything Build opened.
func (r *Resources) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	return errors.Join(errs...)
}

// Build turns the file into a node.Config, opening the registry, the TLS sources and
// the token provider it names.
func (f *File) Build(ctx context.Context, log *slog.Logger) (node.Config, *Resources, error) {
	res := &Resources{}
	cfg := node.Config{
		NodeID: f.NodeID, Group: f.Group, Listen: f.Listen, Endpoint: f.Endpoint,
		ExternalEndpoint: f.ExternalEndpoint, HealthListen: f.HealthListen, ControlPlane: f.ControlPlane,
		MaxMessageBytes: f.Limits.MaxMessageBytes, QueueLen: f.Limits.QueueLen,
		SubscriberQueueLen: f.Limits.SubscriberQueueLen, MaxHops: f.Limits.MaxHops,
		LinkGrace: time.Duration(f.LinkGrace), LinkTransport: f.LinkTransport, SlowConsumer: node.SlowConsumerPolicy(f.Limits.SlowConsumer), Logger: log,
	}
	fail := func(err error) (node.Config, *Resources, error) {
		_ = res.Close()
		return node.Config{}, nil, err
	}
	var err error
	if f.PeerIdentityPattern != "" {
		if cfg.PeerIdentity, err = node.ParsePeerIdentity(f.PeerIdentityPattern); err != nil {
			return fail(fmt.Errorf("%w: peer_identity_pattern: %w", ErrInvalid, err))
		}
	}
	if cfg.ServerTLS, cfg.LinkTLS, err = f.TLS.configs(ctx, res); err != nil {
		return fail(fmt.Errorf("tls: %w", err))
	}
	if !f.ControlPlaneTLS.empty() {
		_, client, err := f.ControlPlaneTLS.configs(ctx, res)
		if err != nil {
			return fail(fmt.Errorf("control_plane_tls: %w", err))
		}
		cfg.ControlPlaneDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(client))}
	} else {
		cfg.ControlPlaneDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if f.Registry.Backend != "" {
		reg, err := registry.Open(ctx, f.Registry.Backend, f.Registry.Params, log)
		if err != nil {
			return fail(fmt.Errorf("registry: %w", err))
		}
		res.closers = append(res.closers, reg.Close)
		cfg.Registry = reg
	}
	secret := f.Registration.Secret
	if f.Registration.SecretFile != "" {
		raw, err := os.ReadFile(f.Registration.SecretFile)
		if err != nil {
			return fail(fmt.Errorf("registration.secret_file: %w", err))
		}
		secret = string(bytes.TrimSpace(raw))
	}
	tokens, err := nodeauth.NewTokenProvider(ctx, nodeauth.ProviderConfig{Type: f.Registration.Type, Secret: secret, SocketPath: f.Registration.SocketPath})
	if err != nil {
		return fail(fmt.Errorf("registration: %w", err))
	}
	if c, ok := tokens.(interface{ Close() error }); ok {
		res.closers = append(res.closers, c.Close)
	}
	cfg.Tokens = tokens
	return cfg, res, nil
}

// configs returns the server and client sides; both nil when t is empty.
func (t TLS) configs(ctx context.Context, res *Resources) (server, client *tls.Config, err error) {
	switch {
	case t.empty():
		return nil, nil, nil
	case t.SPIFFESocket != "":
		src, err := tlsutil.NewSource(ctx, t.SPIFFESocket)
		if err != nil {
			return nil, nil, err
		}
		res.closers = append(res.closers, src.Close)
		if server, err = src.ServerConfig(t.TrustDomain); err != nil {
			return nil, nil, err
		}
		client, err = src.ClientConfig(t.TrustDomain)
		return server, client, err
	}
	files := tlsutil.Files{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}
	if t.CertFile != "" {
		if server, err = tlsutil.ServerConfig(files, t.TrustDomain); err != nil {
			return nil, nil, err
		}
	}
	client, err = tlsutil.ClientConfig(files, t.ServerName, t.TrustDomain)
	return server, client, err
}
