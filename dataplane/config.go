package dataplane

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// Defaults for Config.
const (
	DefaultAckTimeout      = 30 * time.Second
	DefaultRegisterTimeout = 15 * time.Second
	DefaultBackoffBase     = 200 * time.Millisecond
	DefaultBackoffMax      = 30 * time.Second
	DefaultHealthyAfter    = 10 * time.Second
)

// ConnectionDetails say how other nodes reach this one (RegisterNodeRequest).
type ConnectionDetails struct {
	Endpoint         string
	ExternalEndpoint string
	Metadata         map[string]string
}

// Backoff shapes reconnection delays: attempt n waits a uniformly random time in
// [0, min(Max, Base*2^n)] (full jitter, as internal/backoff computes it for every
// retry loop), at least a millisecond. The attempt count returns to zero after a
// session that registered and stayed up for HealthyAfter.
type Backoff struct {
	Base, Max, HealthyAfter time.Duration
}

// Config configures a Controller.
type Config struct {
	// NodeID is the node's id within its group; Group is its group name. The token
	// identity is always "{Group}/{NodeID}".
	NodeID, Group string
	// Details are sent in every RegisterNodeRequest.
	Details []ConnectionDetails
	// Conn reaches the CP's southbound endpoint. When nil, the controller dials
	// Target with DialOptions (which must choose transport credentials) and closes
	// the connection when Run returns.
	Conn   grpc.ClientConnInterface
	Target string
	// Targets are several control-plane replicas, of which one leads: the
	// controller follows the leader a standby names, and tries the next address
	// when a session fails otherwise. Target, when set too, comes first.
	Targets     []string
	DialOptions []grpc.DialOption
	// Tokens supplies registration credentials; nodeauth.Noop when nil.
	Tokens nodeauth.TokenProvider
	// Datapath is what ConfigCommands are applied to. Required.
	Datapath Datapath
	// AckTimeout bounds the wait for each subscription ack from the datapath.
	AckTimeout time.Duration
	// RegisterTimeout bounds fetching a token plus the registration round trip.
	RegisterTimeout time.Duration
	Backoff         Backoff
	Logger          *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("dataplane: NodeID is required")
	case c.Datapath == nil:
		return errors.New("dataplane: Datapath is required")
	case c.Conn == nil && c.Target == "" && len(c.Targets) == 0:
		return errors.New("dataplane: Conn, Target or Targets is required")
	case c.Conn != nil && len(c.Targets) > 0:
		return errors.New("dataplane: Conn and Targets exclude each other")
	case slices.Contains(c.Targets, ""):
		return errors.New("dataplane: Targets holds an empty address")
	}
	return nil
}

func (c *Config) applyDefaults() {
	if c.Tokens == nil {
		c.Tokens = nodeauth.Noop{}
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = DefaultRegisterTimeout
	}
	if c.Backoff.Base <= 0 {
		c.Backoff.Base = DefaultBackoffBase
	}
	if c.Backoff.Max <= 0 {
		c.Backoff.Max = DefaultBackoffMax
	}
	if c.Backoff.Max < c.Backoff.Base {
		c.Backoff.Max = c.Backoff.Base
	}
	if c.Backoff.HealthyAfter <= 0 {
		c.Backoff.HealthyAfter = DefaultHealthyAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// retrier counts consecutive failed sessions and picks the wait before the next.
type retrier struct {
	b       Backoff
	rnd     func(int64) int64 // nil: math/rand/v2
	attempt int
}

// next is the wait after a session that ended; a session that registered and lasted
// HealthyAfter starts the count again, so one blip after a long healthy run
// reconnects at once, while a CP that accepts and drops at once is still backed off.
func (r *retrier) next(registered bool, lasted time.Duration) time.Duration {
	if registered && lasted >= r.b.HealthyAfter {
		r.attempt = 0
	}
	d := backoff.Backoff{Min: r.b.Base, Max: r.b.Max, Rand: r.rnd}.Delay(r.attempt)
	r.attempt++
	return d
}
