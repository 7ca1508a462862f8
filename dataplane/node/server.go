package node

import (
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

// Link serves one accepted stream. A link's state survives the stream for LinkGrace, so
// that a dialer that reconnects (or a sibling that takes the link over after a gateway
// failover) finds its routes and queue still there.
func (ls linkServer) Link(s nodev1.LinkService_LinkServer) error {
	n := ls.n
	md, _ := metadata.FromIncomingContext(s.Context())
	linkID, from, group := first(md, mdLinkID), first(md, mdNode), first(md, mdGroup)
	if from == "" {
		return status.Error(codes.InvalidArgument, "link stream without the dialer's node id (metadata sb-node)")
	}
	var c *conn
	switch {
	case linkID != "":
		c = n.acceptLink(linkID, from, first(md, mdEndpoint), md.Get(mdSegments))
	case group == n.cfg.Group:
		c = n.newConn(peerIn, "", from, from)
		n.addConn(c)
	default:
		return status.Errorf(codes.PermissionDenied, "node %s of group %s: only nodes of group %s may peer without a control-plane link", from, group, n.cfg.Group)
	}
	if c == nil {
		return status.Error(codes.Unavailable, "node is stopping")
	}
	if err := s.SendHeader(nil); err != nil {
		return err
	}
	st := c.attach()
	err := c.serve(s, st, nil)
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
	n.cfg.Logger.Debug("accepted link broke; waiting for its dialer", "node", n.id, "link", linkID, "from", from, "err", err)
	c.startGrace(n.cfg.LinkGrace, func() { n.removeConn(c) })
	return nil
}

// acceptLink finds or creates the accepted conn of link linkID and claims the link
// for the dialer, from.
func (n *Node) acceptLink(linkID, from, dialed string, segments []string) *conn {
	n.mu.Lock()
	if n.ctx.Err() != nil {
		n.mu.Unlock()
		return nil
	}
	c := n.inLinks[linkID]
	if c == nil {
		c = n.newConn(linkIn, linkID, from, from)
		n.nextConn++
		c.id = n.nextConn
		n.conns[c.id] = c
		n.inLinks[linkID] = c
	}
	c.mu.Lock()
	c.remote, c.endpoint, c.dialed = from, from, dialed
	c.mu.Unlock()
	c.setSegments(segments)
	n.mu.Unlock()
	if n.ctrl != nil {
		_ = n.ctrl.ClaimLink(dataplane.Claim{LinkID: linkID, Endpoint: dialed, RemoteNodeID: from})
	}
	return c
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
