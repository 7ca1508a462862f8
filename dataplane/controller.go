package dataplane

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// ErrNotConnected: Deregister found no registered session to deregister on.
var ErrNotConnected = errors.New("dataplane: not connected to the control plane")

// minConnectTimeout bounds one TCP+TLS connect attempt of the channel we dial.
const minConnectTimeout = 5 * time.Second

// DefaultDeregisterTimeout bounds Deregister when its context has no deadline.
const DefaultDeregisterTimeout = 10 * time.Second

// Stats count the controller's connection attempts since New.
type Stats struct {
	// Attempts is the number of connect attempts started.
	Attempts uint64
	// TokenFailures counts attempts aborted because the TokenProvider failed.
	TokenFailures uint64
	// Registrations counts sessions the CP accepted.
	Registrations uint64
}

// Controller is the data-plane controller: it keeps one registered session with the
// CP and applies the CP's commands to the Datapath. Create it with New, start it with
// Run, and leave with Deregister (or cancel Run's context to just drop the stream).
type Controller struct {
	cfg     Config
	client  controllerv1.ControllerServiceClient
	targets *targets // the connections Run dials itself; nil with Config.Conn
	dp      Datapath
	running atomic.Bool
	msgSeq  atomic.Uint64

	leaving   chan struct{}
	leaveOnce sync.Once

	// notifyMu orders announcement/claim snapshots and sends, so a Withdraw can never
	// be overtaken by an older snapshot.
	notifyMu sync.Mutex

	mu    sync.Mutex
	sess  *session
	regCh chan struct{} // closed while a session is registered
	state sessionState
	// announced and claims outlive sessions: they are replayed to every new one.
	announced map[Name]struct{}
	claims    map[string]Claim
	stats     Stats
}

// New validates cfg and builds a Controller. Nothing is dialed until Run.
func New(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	c := &Controller{
		cfg:       cfg,
		dp:        cfg.Datapath,
		leaving:   make(chan struct{}),
		regCh:     make(chan struct{}),
		state:     newSessionState(),
		announced: make(map[Name]struct{}),
		claims:    make(map[string]Claim),
	}
	return c, nil
}

// dial builds the CP client; a connection Run opened itself is closed when Run ends.
func (c *Controller) dial() error {
	conn := c.cfg.Conn
	if conn == nil {
		// gRPC's own reconnect backoff (up to 120 s by default) would hide the CP
		// coming back from our capped loop, so the channel uses the same bounds.
		b := c.cfg.Backoff
		opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: b.Base, Multiplier: 1.6, Jitter: 0.2, MaxDelay: b.Max},
			MinConnectTimeout: minConnectTimeout,
		})}, c.cfg.DialOptions...)
		addrs := c.cfg.Targets
		if c.cfg.Target != "" {
			addrs = append([]string{c.cfg.Target}, addrs...)
		}
		c.targets = newTargets(addrs, func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, opts...) })
		_, err := c.targets.client() // a malformed address is reported by Run
		return err
	}
	c.client = controllerv1.NewControllerServiceClient(conn)
	return nil
}

// sessionClient is the client the next session uses.
func (c *Controller) sessionClient() (controllerv1.ControllerServiceClient, error) {
	if c.targets != nil {
		return c.targets.client()
	}
	return c.client, nil
}

// Run connects, registers and serves the CP until ctx ends (returns ctx.Err()) or
// Deregister is called (returns nil). Between sessions it waits with backoff and
// never gives up. Run may be called once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("dataplane: Run called twice")
	}
	if err := c.dial(); err != nil {
		return err
	}
	defer c.closeConn()
	r := retrier{b: c.cfg.Backoff, rnd: rand.Int64N}
	for {
		if c.isLeaving() {
			return nil
		}
		start := time.Now()
		registered, err := c.runSession(ctx)
		if c.isLeaving() {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := r.next(registered, time.Since(start))
		if c.targets != nil {
			wait = c.targets.afterSession(err, wait, time.Now())
		}
		c.cfg.Logger.Warn("control-plane session ended; reconnecting",
			"node", c.nodeLabel(), "err", err, "attempt", r.attempt, "wait", wait, "next", c.target())
		if !c.sleep(ctx, wait) {
			if c.isLeaving() {
				return nil
			}
			return ctx.Err()
		}
	}
}

// sleep waits d; false when ctx ended or the node is leaving.
func (c *Controller) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.leaving:
		return false
	}
}

func (c *Controller) isLeaving() bool {
	select {
	case <-c.leaving:
		return true
	default:
		return false
	}
}

func (c *Controller) closeConn() {
	if c.targets != nil {
		c.targets.close()
	}
}

// target is the address the next session dials ("" with a Conn).
func (c *Controller) target() string {
	if c.targets == nil {
		return ""
	}
	return c.targets.current()
}

func (c *Controller) nodeLabel() string { return c.cfg.Group + "/" + c.cfg.NodeID }

func (c *Controller) newMsgID() string {
	return "dp-" + strconv.FormatUint(c.msgSeq.Add(1), 10)
}

// Registered reports whether a session is currently registered with the CP.
func (c *Controller) Registered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil && c.sess.registered.Load()
}

// WaitRegistered blocks until a session is registered or ctx ends.
func (c *Controller) WaitRegistered(ctx context.Context) error {
	c.mu.Lock()
	ch := c.regCh
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns a snapshot of the attempt counters.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Deregister stops reconnecting, sends DeregisterNodeRequest on the registered
// session and waits for the CP's response (bounded by ctx, or
// DefaultDeregisterTimeout when ctx has no deadline), then closes the stream. Run
// returns nil afterwards whatever the outcome. ErrNotConnected when no session was
// registered.
func (c *Controller) Deregister(ctx context.Context) error {
	c.leaveOnce.Do(func() { close(c.leaving) })
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return ErrNotConnected
	}
	defer s.cancel()
	if !s.registered.Load() {
		return ErrNotConnected
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultDeregisterTimeout)
		defer cancel()
	}
	return s.deregister(ctx)
}
