package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// linkServer accepts links from other groups' nodes and peerings from this group's.
type linkServer struct {
	nodev1.UnimplementedLinkServiceServer
	n *Node
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Link serves one accepted stream of the gRPC transport.
func (ls linkServer) Link(s nodev1.LinkService_LinkServer) error {
	return ls.n.serveAccepted(s.Context(), s, func() error { return s.SendHeader(nil) })
}

// serveAccepted serves one accepted stream of either transport; accept tells the
// dialer it was accepted. A link's state survives the stream for LinkGrace, so that a
// dialer that reconnects (or a sibling that takes the link over after a gateway
// failover) finds its routes and queue still there.
func (n *Node) serveAccepted(ctx context.Context, s stream, accept func() error) error {
	h, err := n.identify(ctx)
	if err != nil {
		return err
	}
	c, err := n.acceptConn(ctx, h)
	if err != nil {
		return err
	}
	if err := accept(); err != nil {
		return err
	}
	st := c.attach()
	err = c.serve(s, st, nil)
	if !c.detach(st.gen) || c.ctx.Err() != nil {
		// A newer stream took over, or the conn closed: this stream's error is moot.
		return nil //nolint:nilerr // the stream ends either way; its error is not the caller's
	}
	if c.kind == peerIn || isEOF(err) {
		// A peer redials with its full offer; a link whose dialer ended it cleanly was
		// deleted there.
		n.removeConn(c)
		return nil
	}
	n.cfg.Logger.Debug("accepted link broke; waiting for its dialer", "node", n.id, "link", h.linkID, "from", h.node, "err", err)
	c.startGrace(n.cfg.LinkGrace, func() { n.removeConn(c) })
	return nil
}

// acceptConn finds or makes the conn an accepted stream serves: a control-plane link
// (with a link id), or a peering from a node of the group.
func (n *Node) acceptConn(ctx context.Context, h hello) (*conn, error) {
	switch {
	case h.linkID != "":
		c, err := n.acceptLink(h)
		switch {
		case errors.Is(err, errStopping):
			return nil, status.Error(codes.Unavailable, err.Error())
		case err != nil:
			return nil, n.deny(ctx, h, denyLink, err.Error())
		}
		return c, nil
	case h.group == n.cfg.Group:
		c := n.newConn(peerIn, "", h.node, h.node)
		n.addConn(c)
		return c, nil
	}
	return nil, n.deny(ctx, h, denyLink, fmt.Sprintf("node %s of group %s: only nodes of group %s may peer without a control-plane link", h.node, h.group, n.cfg.Group))
}

var errStopping = errors.New("node is stopping")

// acceptLink finds or creates the accepted conn of link h.linkID and claims the link
// for the dialer. An error other than errStopping says why the dialer may not present
// the link.
func (n *Node) acceptLink(h hello) (*conn, error) {
	n.mu.Lock()
	if n.ctx.Err() != nil {
		n.mu.Unlock()
		return nil, errStopping
	}
	if err := n.checkLinkLocked(h.linkID, h.group); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	c := n.inLinks[h.linkID]
	if c == nil {
		c = n.newConn(linkIn, h.linkID, h.node, h.node)
		n.nextConn++
		c.id = n.nextConn
		n.conns[c.id] = c
		n.inLinks[h.linkID] = c
	}
	c.mu.Lock()
	c.remote, c.endpoint, c.dialed = h.node, h.node, h.endpoint
	c.mu.Unlock()
	c.setSegments(h.segments)
	n.mu.Unlock()
	if n.ctrl != nil {
		_ = n.ctrl.ClaimLink(dataplane.Claim{LinkID: h.linkID, Endpoint: h.endpoint, RemoteNodeID: h.node})
	}
	return c, nil
}

// startGrace removes the conn after d unless a stream attaches first.
func (c *conn) startGrace(d time.Duration, expire func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.up {
		return
	}
	gen := c.gen
	c.graceT = time.AfterFunc(d, func() {
		c.mu.Lock()
		stale := c.gen == gen && !c.up
		c.mu.Unlock()
		if stale {
			expire()
		}
	})
}
