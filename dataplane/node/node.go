package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
)

// Node is the reference data-plane node. Create it with New, run it with Run.
type Node struct {
	cfg     Config
	id      string
	ctx     context.Context // ends when the node stops; every conn derives from it
	cancel  context.CancelFunc
	metrics *metrics
	tab     *table
	ctrl    *dataplane.Controller
	lis     net.Listener
	hlis    net.Listener // health and metrics; nil when not served
	srv     *grpc.Server
	dialOpt []grpc.DialOption
	// peerAuth: the listener verifies client certificates, so a dialer is who its
	// certificate says (identity.go).
	peerAuth bool
	rr       atomic.Uint64
	seq      atomic.Uint64
	reqSeq   atomic.Uint64
	// paths are the requests made here or passed on, awaiting their replies.
	paths   replyPaths
	killed  atomic.Bool
	running atomic.Bool
	wg      sync.WaitGroup

	// failing are the links (by label) whose last attempt to open a stream failed:
	// the first failure of a series is a warning, the retries after it, even those
	// of a new Connect for the same link, debug lines (connectFailed).
	failing syncSet

	// annMu orders changes of what the node offers (its group peers, the control
	// plane's announcements), so that an offer and its withdrawal never swap.
	annMu sync.Mutex

	mu         sync.Mutex
	nextConn   dataplane.ConnID
	conns      map[dataplane.ConnID]*conn
	inLinks    map[string]*conn // accepted links by link id
	peers      map[string]*conn // dialed peerings by node id
	nextSub    dataplane.SubID
	routes     map[dataplane.SubID]route
	routeByKey map[route]dataplane.SubID
	nextLocal  uint64
	locals     map[uint64]*localSub
	offers     map[dataplane.Name]*offer
	linkOwners linkOwners
}

// route is a control-plane route: a name sent over a conn.
type route struct {
	conn dataplane.ConnID
	name dataplane.Name
}

// offer counts why the node takes a name: local subscribers, and routes it forwards
// the name over. Peers in the group learn the name, flagged local when any subscriber
// is local.
type offer struct{ local, routed int }

var (
	_ dataplane.Datapath = (*Node)(nil)
	_ dataplane.Relinker = (*Node)(nil)
)

// New validates cfg, opens the listener and builds the node; nothing runs until Run.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	n := &Node{
		cfg: cfg, id: cfg.Group + "/" + cfg.NodeID, tab: newTable(),
		conns: map[dataplane.ConnID]*conn{}, inLinks: map[string]*conn{}, peers: map[string]*conn{},
		routes: map[dataplane.SubID]route{}, routeByKey: map[route]dataplane.SubID{},
		locals: map[uint64]*localSub{}, offers: map[dataplane.Name]*offer{},
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.metrics = newMetrics(cfg.Metrics, n)
	n.peerAuth = verifiesClients(cfg.ServerTLS)
	if cfg.ServerTLS != nil && !n.peerAuth {
		cfg.Logger.Warn("TLS without client certificates: the node cannot tell the nodes that dial it apart, and takes them at their word", "node", n.id)
	}
	n.lis = cfg.Listener
	if n.lis == nil {
		lis, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			n.cancel()
			return nil, fmt.Errorf("node: listen on %s: %w", cfg.Listen, err)
		}
		n.lis = lis
	}
	if cfg.HealthListen != "" {
		hlis, err := net.Listen("tcp", cfg.HealthListen)
		if err != nil {
			_ = n.lis.Close()
			n.cancel()
			return nil, fmt.Errorf("node: health listen on %s: %w", cfg.HealthListen, err)
		}
		n.hlis = hlis
	}
	if n.cfg.Endpoint == "" {
		n.cfg.Endpoint = n.lis.Addr().String()
	}
	n.srv, n.dialOpt = n.grpcServer(), n.linkDialOptions()
	if err := n.newController(); err != nil {
		_ = n.lis.Close()
		if n.hlis != nil {
			_ = n.hlis.Close()
		}
		n.cancel()
		return nil, err
	}
	return n, nil
}

// minPingInterval is the most often the node's server admits a client's keepalive
// pings: at most the shortest interval gRPC clients ping at (10 s).
const minPingInterval = 5 * time.Second

// controlKeepalive is the keepalive of the node's connection to the control plane,
// whose southbound admits pings every 5 s (controlplane/southbound.ServerOptions).
var controlKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// linkKeepalive is the keepalive of a dialed link or peering: the link's client
// configuration's, DefaultKeepaliveInterval/DefaultKeepaliveTimeout where it gives
// none. An interval below gRPC's 10 s minimum is raised to it.
func linkKeepalive(interval, timeout time.Duration) keepalive.ClientParameters {
	if interval <= 0 {
		interval = DefaultKeepaliveInterval
	}
	if timeout <= 0 {
		timeout = DefaultKeepaliveTimeout
	}
	return keepalive.ClientParameters{Time: max(interval, 10*time.Second), Timeout: timeout, PermitWithoutStream: true}
}

// msgLimit is the gRPC message size limit: a whole batch of the largest messages.
func (n *Node) msgLimit() int { return msgLimitFor(n.cfg.MaxMessageBytes) }

// msgLimitFor is the message size limit of a node with the given max_message_bytes.
func msgLimitFor(maxMessageBytes int) int { return maxMessageBytes + maxBatchBytes + 64<<10 }

func (n *Node) grpcServer() *grpc.Server {
	opts := append(serverOptions(), grpc.MaxRecvMsgSize(n.msgLimit()), grpc.MaxSendMsgSize(n.msgLimit()),
		grpc.ChainUnaryInterceptor(n.unaryClientCheck), grpc.ChainStreamInterceptor(n.streamClientCheck),
		// The accepting end of a link pings too, so that it notices a silent dialer.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: DefaultKeepaliveInterval, Timeout: DefaultKeepaliveTimeout}),
		// Admit the dialers' pings: gRPC's default policy refuses pings more often than
		// every 5 minutes and closes the connection (ENHANCE_YOUR_CALM). gRPC clients
		// ping at most every 10 s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}))
	if n.cfg.ServerTLS != nil {
		// The listener does the handshake (listenMux).
		opts = append(opts, grpc.Creds(handshaked{}))
	}
	srv := grpc.NewServer(opts...)
	nodev1.RegisterLinkServiceServer(srv, linkServer{n: n})
	nodev1.RegisterNodeServiceServer(srv, clientServer{n: n})
	return srv
}

func (n *Node) linkDialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if n.cfg.LinkTLS != nil {
		creds = credentials.NewTLS(n.cfg.LinkTLS)
	}
	return append(ClientOptions(),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n.msgLimit()), grpc.MaxCallSendMsgSize(n.msgLimit())),
	)
}

func (n *Node) newController() error {
	if len(n.cfg.ControlPlane) == 0 {
		return nil
	}
	opts := n.cfg.ControlPlaneDialOptions
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// A control plane that goes silent (its stream open, nothing delivered) ends the
	// stream within controlKeepalive's Time + Timeout; the controller reconnects.
	opts = slices.Concat(opts, []grpc.DialOption{grpc.WithKeepaliveParams(controlKeepalive)})
	ctrl, err := dataplane.New(dataplane.Config{
		NodeID: n.cfg.NodeID, Group: n.cfg.Group,
		Details: []dataplane.ConnectionDetails{{Endpoint: n.cfg.Endpoint, ExternalEndpoint: n.cfg.ExternalEndpoint}},
		// Several addresses are replicas of which one leads: the controller follows
		// the leader a standby names (a channel over all of them would stay with
		// whichever replica accepted the connection).
		Targets:     n.cfg.ControlPlane,
		DialOptions: opts, Tokens: n.cfg.Tokens, Datapath: n, AckTimeout: n.cfg.AckTimeout,
		Backoff: n.cfg.Backoff, Logger: n.cfg.Logger.With("component", "controller"),
	})
	if err != nil {
		return err
	}
	n.ctrl = ctrl
	return nil
}

// ID is the node's effective id, "{group}/{node}".
func (n *Node) ID() string { return n.id }

// Addr is the address the node listens on.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// Controller is the node's control-plane client (nil without a control plane).
func (n *Node) Controller() *dataplane.Controller { return n.ctrl }

// Run serves until ctx ends, then leaves gracefully: it deregisters from the control
// plane and the registry, closes its links and ends its clients' streams. After Kill
// it leaves at once instead, as a crash would.
func (n *Node) Run(ctx context.Context) error {
	if !n.running.CompareAndSwap(false, true) {
		return errors.New("node: Run called twice")
	}
	serveErr := make(chan error, 1)
	mux := newListenMux(n.lis, n.cfg.ServerTLS, n.acceptFramed)
	n.wg.Go(func() { serveErr <- n.srv.Serve(mux) })
	stopHTTP := n.serveHealth()
	var err error
	runCtx, stopRun := context.WithCancel(n.ctx)
	var helpers sync.WaitGroup
	if n.ctrl != nil {
		helpers.Go(func() { _ = n.ctrl.Run(runCtx) })
	}
	if n.cfg.Registry != nil {
		helpers.Go(func() { n.discover(runCtx) })
	}
	n.cfg.Logger.Info("node running", "node", n.id, "listen", n.Addr(), "external", n.cfg.ExternalEndpoint)
	select {
	case <-ctx.Done():
	case <-n.ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("node: serve: %w", err)
	}
	n.shutdown(stopRun, &helpers)
	stopHTTP()
	mux.wait()
	n.wg.Wait()
	return err
}

// Kill makes Run return as if the process had crashed: no deregistration, streams cut.
func (n *Node) Kill() {
	n.killed.Store(true)
	n.cancel()
}

func (n *Node) shutdown(stopRun context.CancelFunc, helpers *sync.WaitGroup) {
	graceful := !n.killed.Load()
	if graceful && n.ctrl != nil && n.ctrl.Registered() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.ctrl.Deregister(ctx); err != nil {
			n.cfg.Logger.Warn("deregistration failed", "node", n.id, "err", err)
		}
		cancel()
	}
	stopRun()
	helpers.Wait()
	if graceful && n.cfg.Registry != nil {
		n.unregisterSelf()
	}
	for _, c := range n.allConns() {
		n.removeConn(c)
	}
	n.endLocals()
	n.cancel()
	if graceful {
		grpcstop.Stop(n.srv, 5*time.Second)
		return
	}
	n.srv.Stop()
}

// serveHealth serves /healthz, /readyz and /metrics when HealthListen is set.
func (n *Node) serveHealth() func() {
	if n.hlis == nil {
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if n.ctrl != nil && !n.ctrl.Registered() {
			http.Error(w, "not ready: not registered with the control plane", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.cfg.Metrics, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.wg.Go(func() { _ = hs.Serve(n.hlis) })
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
}

// HealthAddr is the address of the HTTP health endpoint ("" when not served).
func (n *Node) HealthAddr() string {
	if n.hlis == nil {
		return ""
	}
	return n.hlis.Addr().String()
}

func (n *Node) allConns() []*conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*conn, 0, len(n.conns))
	for _, c := range n.conns {
		out = append(out, c)
	}
	return out
}

func (n *Node) addConn(c *conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextConn++
	c.id = n.nextConn
	n.conns[c.id] = c
}

// removeConn closes c and forgets it, its routes and its peer offers.
func (n *Node) removeConn(c *conn) {
	n.annMu.Lock()
	n.mu.Lock()
	if n.conns[c.id] != c {
		n.mu.Unlock()
		n.annMu.Unlock()
		return
	}
	delete(n.conns, c.id)
	info := c.info()
	if c.kind == linkIn && n.inLinks[info.LinkID] == c {
		delete(n.inLinks, info.LinkID)
	}
	if c.kind == peerOut && n.peers[c.remote] == c {
		delete(n.peers, c.remote)
	}
	var gone []dataplane.Name
	for id, r := range n.routes {
		if r.conn == c.id {
			delete(n.routes, id)
			delete(n.routeByKey, r)
			gone = append(gone, r.name)
		}
	}
	for _, name := range gone {
		n.changeOfferLocked(name, 0, -1)
	}
	n.mu.Unlock()
	n.annMu.Unlock()
	n.tab.forgetConn(c)
	c.close()
	if c.kind == linkIn && n.ctrl != nil {
		n.ctrl.ReleaseClaim(info.LinkID)
	}
}

// changeOffer updates why the node takes name and tells its peers and the control
// plane when that changes the answer. Callers hold annMu.
func (n *Node) changeOffer(name dataplane.Name, dLocal, dRouted int) {
	n.mu.Lock()
	announce := n.changeOfferLocked(name, dLocal, dRouted)
	n.mu.Unlock()
	if n.ctrl == nil || announce == 0 {
		return
	}
	if announce > 0 {
		_ = n.ctrl.Announce(name)
	} else {
		_ = n.ctrl.Withdraw(name)
	}
}

// changeOfferLocked is changeOffer under n.mu; it returns +1 when the control plane
// is to be told of a first local subscriber, -1 of the last one gone.
func (n *Node) changeOfferLocked(name dataplane.Name, dLocal, dRouted int) int {
	o := n.offers[name]
	if o == nil {
		o = &offer{}
		n.offers[name] = o
	}
	before := *o
	o.local += dLocal
	o.routed += dRouted
	after := *o
	if after.local == 0 && after.routed == 0 {
		delete(n.offers, name)
	}
	if (before.local > 0) != (after.local > 0) || (before.routed > 0) != (after.routed > 0) {
		for _, p := range n.peers {
			if after.local == 0 && after.routed == 0 {
				p.dropInterest(name)
			} else {
				p.setInterest(name, after.local > 0, nil)
			}
		}
	}
	switch {
	case before.local == 0 && after.local > 0:
		return 1
	case before.local > 0 && after.local == 0:
		return -1
	}
	return 0
}
