package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/nodeauth"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Defaults for Config.
const (
	DefaultMaxMessageBytes    = 1 << 20
	DefaultQueueLen           = 8192
	DefaultSubscriberQueueLen = 8192
	DefaultMaxHops            = 16
	DefaultLinkGrace          = 10 * time.Second
	DefaultPublishWait        = 100 * time.Millisecond
	DefaultDialTimeout        = 5 * time.Second
	// The link transports (Config.LinkTransport).
	TransportFramed = "framed"
	TransportGRPC   = "grpc"
	// DefaultRequestTimeout is how long a request waits for its answer when the caller
	// gives no timeout; MaxRequestTimeout the longest it may wait, and so how long a
	// node keeps the way back for a request it passed on.
	DefaultRequestTimeout = 5 * time.Second
	MaxRequestTimeout     = 2 * time.Minute
	// DefaultKeepaliveInterval and DefaultKeepaliveTimeout are a link's gRPC keepalive
	// when its client configuration (the control plane's links.keepalive_interval and
	// links.keepalive_timeout) gives none, and a peering's: a connection that reads
	// nothing for the interval is pinged, and closed when the ping is not answered
	// within the timeout, so a link whose path goes silent breaks within their sum.
	// gRPC pings no more often than every 10 s: a shorter interval is raised to that.
	DefaultKeepaliveInterval = 10 * time.Second
	DefaultKeepaliveTimeout  = 5 * time.Second
	// ServiceName is the registry service every node registers itself under, with its
	// group as the cluster, so that the nodes of a group find each other.
	ServiceName = "switchboard-node"
)

// Config configures a Node.
type Config struct {
	// NodeID is the node's id within Group; its effective id is "{Group}/{NodeID}".
	NodeID, Group string
	// Listener serves links, peerings and local clients; when nil, Listen is opened.
	Listener net.Listener
	Listen   string
	// Endpoint is how the nodes of this group reach this one (registered in the
	// registry and sent to the control plane); default: the listener's address.
	Endpoint string
	// ExternalEndpoint is how nodes of other groups reach this one; empty: this node
	// only dials links, it never receives one.
	ExternalEndpoint string
	// ControlPlane lists the control plane's southbound addresses — its replicas,
	// of which a standby names the leader to go to, any other failure moving to the
	// next; empty runs the node without one (local clients and the group only).
	ControlPlane []string
	// ControlPlaneDialOptions choose the transport credentials toward the control
	// plane (default: plaintext).
	ControlPlaneDialOptions []grpc.DialOption
	// Tokens supplies registration credentials (default nodeauth.Noop).
	Tokens nodeauth.TokenProvider
	// Registry is where the node registers itself and finds the nodes of its group;
	// nil: no peering within the group.
	Registry registry.Registry
	// RegistrationTTL is the TTL of the node's own registry entry; it is refreshed at a
	// third of it.
	RegistrationTTL time.Duration
	// ServerTLS secures the listener (nil: plaintext); LinkTLS is the client side used
	// to dial links and peers (nil: plaintext). When ServerTLS verifies client
	// certificates, a node that dials this one is identified by its certificate (see
	// PeerIdentity), not by what it says.
	ServerTLS, LinkTLS *tls.Config
	// PeerIdentity maps a peer node's SPIFFE ID to its group and node id: a regular
	// expression with the named groups "group" and "node" (default
	// DefaultPeerIdentity: the trust domain is the group, the last path segment the
	// node). Used with mTLS only.
	PeerIdentity *regexp.Regexp
	// MaxMessageBytes bounds a message's payload.
	MaxMessageBytes int
	// QueueLen bounds each link's and peering's outgoing queue (messages);
	// SubscriberQueueLen each local subscriber's.
	QueueLen, SubscriberQueueLen int
	// SlowConsumer is what becomes of a local subscriber whose queue is full when a
	// copy is meant for it (default SlowConsumerDisconnect).
	SlowConsumer SlowConsumerPolicy
	// MaxHops is the hop count a published message starts with, and the most a
	// message that comes in from another node keeps.
	MaxHops uint32
	// LinkGrace is how long an accepted link whose stream broke keeps its state while
	// its dialer reconnects.
	LinkGrace time.Duration
	// PublishWait is how long a local publish waits for room in a full queue before the
	// copy is dropped (backpressure on the publisher; forwarded messages never wait, so
	// a slow link never holds up another).
	PublishWait time.Duration
	// DialTimeout bounds the first connection of a new link.
	DialTimeout time.Duration
	// LinkTransport is how this node dials links and peerings: TransportFramed (the
	// default) or TransportGRPC, for a group that still has nodes which only accept
	// gRPC. The listener accepts both either way.
	LinkTransport string
	// Backoff spaces link and peering reconnects, and control-plane reconnects.
	Backoff dataplane.Backoff
	// AckTimeout bounds the wait for a route's subscription ack (default 30 s).
	AckTimeout time.Duration
	// HealthListen serves /healthz, /readyz and /metrics over HTTP; empty: not served.
	HealthListen string
	// Metrics registers the node's metrics (default: a registry of its own).
	Metrics *prometheus.Registry
	Logger  *slog.Logger
}

// SlowConsumerPolicy says what the node does with a subscriber that does not keep up.
type SlowConsumerPolicy string

const (
	// SlowConsumerDisconnect cuts the subscriber off: its subscription ends (its
	// stream with RESOURCE_EXHAUSTED), what was queued for it is dropped, counted. A
	// subscriber that stalls costs the node its queue and no more, and never holds up
	// a publisher for longer than one publish wait.
	SlowConsumerDisconnect SlowConsumerPolicy = "disconnect"
	// SlowConsumerDrop keeps the subscriber and drops, counted, each copy that finds
	// its queue full.
	SlowConsumerDrop SlowConsumerPolicy = "drop"
)

// ParseSlowConsumerPolicy checks a policy's name ("" is the default).
func ParseSlowConsumerPolicy(s string) (SlowConsumerPolicy, error) {
	switch p := SlowConsumerPolicy(s); p {
	case "":
		return SlowConsumerDisconnect, nil
	case SlowConsumerDisconnect, SlowConsumerDrop:
		return p, nil
	}
	return "", fmt.Errorf("slow consumer policy %q: want %s or %s", s, SlowConsumerDisconnect, SlowConsumerDrop)
}

var defaultPeerIdentity = regexp.MustCompile(DefaultPeerIdentity)

func (c *Config) validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("node id is required"))
	} else if err := endpoint.ValidateName("node id", c.NodeID); err != nil {
		errs = append(errs, err)
	}
	if c.Group == "" {
		errs = append(errs, errors.New("group is required"))
	} else if err := endpoint.ValidateName("group", c.Group); err != nil {
		errs = append(errs, err)
	}
	if c.Listener == nil && c.Listen == "" {
		errs = append(errs, errors.New("a listen address is required"))
	}
	if c.MaxMessageBytes < 0 || c.QueueLen < 0 || c.SubscriberQueueLen < 0 {
		errs = append(errs, errors.New("limits and queue lengths must not be negative"))
	}
	switch c.LinkTransport {
	case "", TransportFramed, TransportGRPC:
	default:
		errs = append(errs, fmt.Errorf("link transport %q: want %s or %s", c.LinkTransport, TransportFramed, TransportGRPC))
	}
	if _, err := ParseSlowConsumerPolicy(string(c.SlowConsumer)); err != nil {
		errs = append(errs, err)
	}
	if c.PeerIdentity != nil {
		if err := checkPeerIdentity(c.PeerIdentity); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("node config: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Config) applyDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	def(&c.QueueLen, DefaultQueueLen)
	def(&c.SubscriberQueueLen, DefaultSubscriberQueueLen)
	c.SlowConsumer, _ = ParseSlowConsumerPolicy(string(c.SlowConsumer))
	if c.MaxHops == 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.LinkTransport == "" {
		c.LinkTransport = TransportFramed
	}
	durs := []struct {
		v *time.Duration
		d time.Duration
	}{
		{&c.LinkGrace, DefaultLinkGrace}, {&c.PublishWait, DefaultPublishWait},
		{&c.DialTimeout, DefaultDialTimeout}, {&c.RegistrationTTL, 30 * time.Second},
		{&c.Backoff.Base, 100 * time.Millisecond}, {&c.Backoff.Max, 5 * time.Second},
		{&c.Backoff.HealthyAfter, 10 * time.Second},
	}
	for _, d := range durs {
		if *d.v <= 0 {
			*d.v = d.d
		}
	}
	if c.Tokens == nil {
		c.Tokens = nodeauth.Noop{}
	}
	if c.PeerIdentity == nil {
		c.PeerIdentity = defaultPeerIdentity
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
