package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
)

// Metadata keys of a LinkService.Link stream.
const (
	mdLinkID   = "sb-link-id"
	mdNode     = "sb-node"
	mdGroup    = "sb-group"
	mdEndpoint = "sb-endpoint"
	mdSegments = "sb-segment" // one value per segment of the link
)

// linkConfig is what the node reads from the control plane's client configuration of
// a link.
type linkConfig struct {
	Segments []string `json:"segments"`
	// Go duration strings (controlplane.ClientConfig); empty: the node's defaults.
	KeepaliveInterval string `json:"keepalive_interval"`
	KeepaliveTimeout  string `json:"keepalive_timeout"`
}

// keepalive is the link's gRPC keepalive (linkKeepalive).
func (lc linkConfig) keepalive() (keepalive.ClientParameters, error) {
	var d [2]time.Duration
	for i, v := range []string{lc.KeepaliveInterval, lc.KeepaliveTimeout} {
		if v == "" {
			continue
		}
		var err error
		if d[i], err = time.ParseDuration(v); err != nil {
			return keepalive.ClientParameters{}, fmt.Errorf("keepalive: %w", err)
		}
	}
	return linkKeepalive(d[0], d[1]), nil
}

// Connect dials endpoint for link linkID. It returns once the first stream is up (or
// fails within DialTimeout); afterwards the link redials by itself whenever its stream
// breaks, until Disconnect.
func (n *Node) Connect(ctx context.Context, linkID, endpoint string, config json.RawMessage) (dataplane.ConnID, error) {
	if n.ctx.Err() != nil {
		return 0, errors.New("node is stopping")
	}
	var lc linkConfig
	if len(config) > 0 {
		if err := json.Unmarshal(config, &lc); err != nil {
			return 0, fmt.Errorf("link %s: config: %w", linkID, err)
		}
	}
	ka, err := lc.keepalive()
	if err != nil {
		return 0, fmt.Errorf("link %s: config: %w", linkID, err)
	}
	c := n.newConn(linkOut, linkID, endpoint, "")
	c.keepalive = ka
	c.setSegments(lc.Segments)
	n.addConn(c)
	first := make(chan error, 1)
	n.wg.Go(func() { n.dialLoop(c, first) })
	t := time.NewTimer(n.cfg.DialTimeout)
	defer t.Stop()
	select {
	case err = <-first:
	case <-t.C:
		err = fmt.Errorf("no stream within %s", n.cfg.DialTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		n.removeConn(c)
		return 0, err
	}
	return c.id, nil
}

// dialLoop keeps a dialed conn's stream up until the conn closes. first, when not nil,
// gets the outcome of the first attempt, which is not retried. A connection whose
// keepalive ping goes unanswered breaks the stream, as a closed one does.
func (n *Node) dialLoop(c *conn, first chan<- error) {
	var client nodev1.LinkServiceClient // nil: the framed transport
	if n.cfg.LinkTransport == TransportGRPC {
		cc, err := grpc.NewClient(c.endpoint, slices.Concat(n.dialOpt, []grpc.DialOption{grpc.WithKeepaliveParams(c.keepalive)})...)
		if err != nil {
			if first != nil {
				first <- err
			}
			return
		}
		defer func() { _ = cc.Close() }()
		client = nodev1.NewLinkServiceClient(cc)
	}
	attempt := 0
	for c.ctx.Err() == nil {
		start := time.Now()
		opened, err := n.runStream(c, client, &first)
		if !opened && c.ctx.Err() == nil {
			n.connectFailed(c, err)
		}
		if first != nil {
			first <- err
			return
		}
		if c.ctx.Err() != nil {
			return
		}
		if time.Since(start) > n.cfg.Backoff.HealthyAfter {
			attempt = 0
		}
		wait := n.backoff(attempt)
		attempt++
		n.cfg.Logger.Debug("link stream ended; redialling", "node", n.id, "link", c.label(), "endpoint", c.endpoint, "err", err, "wait", wait)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// connectFailed reports a stream that could not be opened: the reason (a refused
// connection, a TLS handshake a wrong CA fails, ...) is what an operator needs, so
// it is logged at warn, not only retried. The first failure of a series is a
// warning; the retries that follow, the node's own and the control plane's new
// Connects for the same link alike, are debug lines, until a stream opens.
func (n *Node) connectFailed(c *conn, err error) {
	n.metrics.connectFails.WithLabelValues(c.label()).Inc()
	level := slog.LevelDebug
	if n.failing.add(c.label()) {
		level = slog.LevelWarn
	}
	n.cfg.Logger.Log(n.ctx, level, "link stream could not be opened", "node", n.id, "link", c.label(), "endpoint", c.endpoint, "err", err)
}

// syncSet is a set of strings safe for concurrent use.
type syncSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// add puts s in the set; it reports whether s was new.
func (s *syncSet) add(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; ok {
		return false
	}
	if s.m == nil {
		s.m = map[string]struct{}{}
	}
	s.m[k] = struct{}{}
	return true
}

func (s *syncSet) remove(k string) {
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// backoff is the full-jitter wait before redial attempt k.
func (n *Node) backoff(k int) time.Duration {
	return backoff.Backoff{Min: n.cfg.Backoff.Base, Max: n.cfg.Backoff.Max}.Delay(k)
}

// runStream opens one stream and serves it; opened says whether the far end answered.
// Once it has, *first gets nil and is cleared, so that later failures are retried.
func (n *Node) runStream(c *conn, client nodev1.LinkServiceClient, first *chan<- error) (opened bool, _ error) {
	s, peerCtx, done, err := n.openStream(c, client)
	if err != nil {
		return false, err
	}
	defer done()
	if err := n.checkPeerServer(peerCtx, c); err != nil {
		return false, err
	}
	n.failing.remove(c.label()) // a new series of failures warns again
	if *first != nil {
		*first <- nil
		*first = nil
	}
	st := c.attach()
	defer c.detach(st.gen)
	return true, c.serve(s, st, func(reader <-chan error) {
		// Closed on purpose: tell the far end with a clean end of stream, so it drops
		// its side at once instead of waiting for a redial.
		_ = s.CloseSend()
		select {
		case err := <-reader:
			_ = err // the far end's answer to the close; nothing to do with it
		case <-time.After(time.Second):
		}
	})
}

// dialedStream is a link stream this node opened, on either transport.
type dialedStream interface {
	stream
	CloseSend() error
}

// openStream opens a stream of c, on the framed transport when client is nil; it
// returns once the far end accepted it, with a context that carries the far end's
// address and TLS state, and done to call when the stream is over.
func (n *Node) openStream(c *conn, client nodev1.LinkServiceClient) (dialedStream, context.Context, func(), error) {
	c.mu.Lock()
	md := metadata.Pairs(mdNode, n.id, mdGroup, n.cfg.Group, mdEndpoint, c.endpoint)
	if c.linkID != "" {
		md.Append(mdLinkID, c.linkID)
	}
	if segs := c.segments(); len(segs) > 0 {
		md.Append(mdSegments, segs...)
	}
	c.mu.Unlock()
	if client == nil {
		f, ctx, err := n.openFramed(c, md)
		if err != nil {
			return nil, nil, nil, err
		}
		return f, ctx, f.close, nil
	}
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(n.ctx, md))
	s, err := client.Link(sctx)
	if err == nil {
		// The header comes back once the far end accepted the stream.
		_, err = s.Header()
	}
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return s, s.Context(), cancel, nil
}

// checkPeerServer holds the node a peering reached against the one the registry named:
// with mTLS on, a registry entry cannot point a peering at another group's node, nor at
// another node of the group.
func (n *Node) checkPeerServer(ctx context.Context, c *conn) error {
	if c.kind != peerOut || !n.peerAuth || n.cfg.LinkTLS == nil {
		return nil
	}
	id, err := n.certIdentity(ctx)
	if err == nil && id.id() != c.remote {
		err = fmt.Errorf("certificate %s is node %s", id.spiffeID, id.id())
	}
	if err != nil {
		return fmt.Errorf("peer %s at %s: %w", c.remote, c.endpoint, err)
	}
	return nil
}

// Disconnect closes conn for good.
func (n *Node) Disconnect(_ context.Context, id dataplane.ConnID) error {
	c := n.conn(id)
	if c == nil {
		return fmt.Errorf("node: conn %d: %w", id, dataplane.ErrConnNotFound)
	}
	n.removeConn(c)
	return nil
}

func (n *Node) conn(id dataplane.ConnID) *conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns[id]
}

// Relink hands a dialed link over to another link id: the far end learns it over the
// stream (or from the metadata of the next one) and claims the new link.
func (n *Node) Relink(_ context.Context, id dataplane.ConnID, link string) error {
	c := n.conn(id)
	if c == nil || c.kind != linkOut {
		return fmt.Errorf("node: conn %d: %w", id, dataplane.ErrConnNotFound)
	}
	c.mu.Lock()
	c.linkID = link
	c.pushCtrlLocked(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Relink{Relink: &nodev1.Relink{LinkId: link}}})
	c.mu.Unlock()
	c.setMetrics(n.metrics.forConn(link))
	return nil
}

// relinked is the accepting side of a hand-over.
func (n *Node) relinked(c *conn, link string) {
	if c.kind != linkIn || link == "" {
		return
	}
	n.mu.Lock()
	if err := n.checkLinkLocked(link, groupOf(c.remoteID())); err != nil {
		n.mu.Unlock()
		n.metrics.identityDenied.WithLabelValues(denyLink).Inc()
		n.cfg.Logger.Warn("hand-over to another link refused", "node", n.id, "link", c.label(), "from", c.remoteID(), "why", err)
		return
	}
	c.mu.Lock()
	old := c.linkID
	c.linkID = link
	c.mu.Unlock()
	if n.inLinks[old] == c {
		delete(n.inLinks, old)
	}
	if prev := n.inLinks[link]; prev != nil && prev != c {
		// A stream for the new id came first; this one carries on under it.
		n.mu.Unlock()
		n.removeConn(prev)
		n.mu.Lock()
	}
	n.inLinks[link] = c
	n.mu.Unlock()
	c.setMetrics(n.metrics.forConn(link))
	if n.ctrl != nil {
		n.ctrl.ReleaseClaim(old)
		c.mu.Lock()
		claim := dataplane.Claim{LinkID: link, Endpoint: c.dialed, RemoteNodeID: c.remote}
		c.mu.Unlock()
		_ = n.ctrl.ClaimLink(claim)
	}
}

// Subscribe installs a control-plane route: name is forwarded over conn, and the far
// end is told over the link, its ack resolving done.
func (n *Node) Subscribe(_ context.Context, id dataplane.ConnID, name dataplane.Name, done func(error)) (dataplane.SubID, error) {
	if err := checkComponents(name); err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrBadName, name, err)
	}
	n.annMu.Lock()
	n.mu.Lock()
	c := n.conns[id]
	if c == nil || c.kind.isPeer() {
		n.mu.Unlock()
		n.annMu.Unlock()
		return 0, fmt.Errorf("node: conn %d: %w", id, dataplane.ErrConnNotFound)
	}
	key := route{conn: id, name: name}
	sub, exists := n.routeByKey[key]
	if !exists {
		n.nextSub++
		sub = n.nextSub
		n.routes[sub], n.routeByKey[key] = key, sub
		n.tab.addRoute(name, c)
		n.changeOfferLocked(name, 0, 1)
	}
	n.mu.Unlock()
	n.annMu.Unlock()
	c.setInterest(name, false, done)
	return sub, nil
}

// Unsubscribe removes a route.
func (n *Node) Unsubscribe(_ context.Context, id dataplane.ConnID, sub dataplane.SubID) error {
	n.annMu.Lock()
	defer n.annMu.Unlock()
	n.mu.Lock()
	c := n.conns[id]
	r, ok := n.routes[sub]
	switch {
	case c == nil:
		n.mu.Unlock()
		return fmt.Errorf("node: conn %d: %w", id, dataplane.ErrConnNotFound)
	case !ok || r.conn != id:
		n.mu.Unlock()
		return fmt.Errorf("node: subscription %d: %w", sub, dataplane.ErrSubNotFound)
	}
	delete(n.routes, sub)
	delete(n.routeByKey, r)
	n.tab.removeRoute(r.name, c)
	n.changeOfferLocked(r.name, 0, -1)
	n.mu.Unlock()
	c.dropInterest(r.name)
	return nil
}

// Connections lists the control-plane links (peerings within the group are the
// node's own business and not reported).
func (n *Node) Connections() []dataplane.ConnInfo {
	var out []dataplane.ConnInfo
	for _, c := range n.allConns() {
		if !c.kind.isPeer() {
			out = append(out, c.info())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Subscriptions lists the control-plane routes.
func (n *Node) Subscriptions() []dataplane.SubInfo {
	n.mu.Lock()
	out := make([]dataplane.SubInfo, 0, len(n.routes))
	for id, r := range n.routes {
		out = append(out, dataplane.SubInfo{ID: id, Conn: r.conn, Name: r.name})
	}
	n.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// isEOF reports a clean end of stream from the far end.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }
