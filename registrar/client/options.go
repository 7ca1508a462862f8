package client

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
)

// Options configure a Client.
type Options struct {
	// Addresses are the registrar replicas, host:port each; the client uses one at a
	// time and moves to another when it fails.
	Addresses []string
	// TLS secures the connection; nil connects in plaintext.
	TLS *tls.Config
	// Node and Cluster identify this agent to the registrar (logs only). Node
	// defaults to the host name.
	Node, Cluster string
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// InOrder makes the client try Addresses in the given order; by default they are
	// shuffled so that agents spread over the replicas.
	InOrder bool
	// BackoffMin and BackoffMax bound the reconnect backoff (full jitter);
	// defaults 100ms and 10s.
	BackoffMin, BackoffMax time.Duration
	// RequestTimeout bounds a write or list call (the caller's context may end it
	// sooner); default 10s. A write waits for a connection within it, which rides
	// out a failover.
	RequestTimeout time.Duration
	// Scoped makes the client hold only the services its watches name and the ones
	// it writes, instead of every endpoint of the fleet: the registrar sends only
	// those (a watch of every service widens the set to all). A List of a service
	// outside the set is asked of the registrar.
	Scoped bool
	// OneShot is for a process that makes a call or two and exits (`switchboard
	// registry register`): no watch stream is kept, Watch is refused, and a call
	// fails at once when no registrar answers instead of waiting for one within
	// RequestTimeout. Its errors name the registrar's address.
	OneShot bool
	// DialOptions are added to the client's own.
	DialOptions []grpc.DialOption
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Addresses) == 0 {
		return o, errors.New("registrar client: at least one registrar address is required")
	}
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.BackoffMin, 100*time.Millisecond)
	def(&o.BackoffMax, 10*time.Second)
	def(&o.RequestTimeout, 10*time.Second)
	return o, nil
}
