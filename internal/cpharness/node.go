package cpharness

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
)

// Node is one data-plane node: a controller driving an in-memory datapath that the
// fabric connects to the other nodes.
type Node struct {
	f        *Fabric
	cfg      NodeConfig
	id       string
	external string

	mu            sync.Mutex
	up            bool
	dp            *memdp.Datapath
	ctrl          *dataplane.Controller
	stop          context.CancelFunc
	done          chan error
	announced     map[dataplane.Name]bool
	dropBeforeSub map[string]bool
}

// ID is the node's effective id, "{group}/{id}".
func (n *Node) ID() string { return n.id }

// Group is the node's group.
func (n *Node) Group() string { return n.cfg.Group }

// External is the node's external endpoint ("" without one).
func (n *Node) External() string { return n.external }

// Up reports whether the node is running (not crashed or deregistered).
func (n *Node) Up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up
}

// Datapath is the node's current datapath (a new one after Restart).
func (n *Node) Datapath() *memdp.Datapath {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dp
}

// Controller is the node's current controller, nil while it is down.
func (n *Node) Controller() *dataplane.Controller {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctrl
}

// boot gives the node a fresh datapath and a controller, and opens its endpoint.
func (n *Node) boot() error {
	n.mu.Lock()
	n.dp = memdp.New()
	if n.cfg.NoOpLog {
		n.dp.DisableLog()
	}
	n.up = true
	n.mu.Unlock()
	if err := n.startController(); err != nil {
		return err
	}
	n.f.listen(n)
	return nil
}

// startController runs a new controller on the current datapath, replaying the node's
// announcements, and makes it the node's controller (the previous one keeps running
// until stopped).
func (n *Node) startController() error {
	n.mu.Lock()
	dp := n.dp
	names := make([]dataplane.Name, 0, len(n.announced))
	for name := range n.announced {
		names = append(names, name)
	}
	n.mu.Unlock()
	var details []dataplane.ConnectionDetails
	details = append(details, dataplane.ConnectionDetails{Endpoint: n.cfg.ID + ".local:46357", ExternalEndpoint: n.external})
	ctrl, err := dataplane.New(dataplane.Config{
		NodeID: n.cfg.ID, Group: n.cfg.Group, Details: details, Conn: n.cfg.Conn, Target: n.cfg.Target, Targets: n.cfg.Targets,
		DialOptions: n.cfg.DialOptions, Tokens: n.cfg.Tokens, Datapath: &wire{Datapath: dp, n: n},
		AckTimeout: n.cfg.AckTimeout, Backoff: n.cfg.Backoff, Logger: n.cfg.Logger,
	})
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctrl.Announce(name); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(n.f.ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	n.mu.Lock()
	n.ctrl, n.stop, n.done = ctrl, cancel, done
	n.mu.Unlock()
	return nil
}

// stopController ends the current controller's Run (its stream drops) and waits.
func (n *Node) stopController() {
	n.mu.Lock()
	stop, done := n.stop, n.done
	n.ctrl, n.stop, n.done = nil, nil, nil
	n.mu.Unlock()
	if stop != nil {
		stop()
		n.wait(done)
	}
}

// wait waits for a stopped controller's Run; anything but the cancellation it was
// stopped with is logged.
func (n *Node) wait(done <-chan error) {
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) && n.cfg.Logger != nil {
		n.cfg.Logger.Warn("controller ended", "node", n.id, "err", err)
	}
}

// Announce makes the node announce name now and after every restart.
func (n *Node) Announce(name dataplane.Name) error {
	n.mu.Lock()
	n.announced[name] = true
	ctrl := n.ctrl
	n.mu.Unlock()
	if ctrl == nil {
		return nil
	}
	return ctrl.Announce(name)
}

// Withdraw retracts an announcement.
func (n *Node) Withdraw(name dataplane.Name) error {
	n.mu.Lock()
	delete(n.announced, name)
	ctrl := n.ctrl
	n.mu.Unlock()
	if ctrl == nil {
		return nil
	}
	return ctrl.Withdraw(name)
}

// Reopen replaces the node's CP stream while its datapath keeps running, the way a
// node behind a half-open connection reconnects: a new controller registers (with the
// live connections) before the old stream is dropped.
func (n *Node) Reopen(ctx context.Context) error {
	n.mu.Lock()
	oldStop, oldDone := n.stop, n.done
	n.mu.Unlock()
	if err := n.startController(); err != nil {
		return err
	}
	if err := n.Controller().WaitRegistered(ctx); err != nil {
		return fmt.Errorf("reopen %s: %w", n.id, err)
	}
	oldStop()
	n.wait(oldDone)
	return nil
}

// Crash kills the node: its stream drops without deregistration, its datapath is
// gone and every connection to or from it is lost on the far end too.
func (n *Node) Crash() {
	n.stopController()
	n.teardown()
}

// Deregister leaves gracefully, then shuts the datapath down.
func (n *Node) Deregister(ctx context.Context) error {
	ctrl := n.Controller()
	if ctrl == nil {
		return errors.New("e2e: node is down")
	}
	err := ctrl.Deregister(ctx)
	n.stopController()
	n.teardown()
	return err
}

// Restart boots a crashed or deregistered node again with an empty datapath.
func (n *Node) Restart() error {
	if n.Up() {
		return errors.New("e2e: node is up")
	}
	return n.boot()
}

func (n *Node) teardown() {
	n.f.unlisten(n)
	n.mu.Lock()
	n.up = false
	dp := n.dp
	n.mu.Unlock()
	for _, c := range dp.Connections() {
		n.farEnd(c).lose(c, n.id)
	}
	dp.Close()
}

// DropLink loses the connection of link on both ends, as a network failure would.
func (n *Node) DropLink(link string) bool {
	dp := n.Datapath()
	for _, c := range dp.Connections() {
		if c.LinkID == link {
			dp.Drop(c.ID)
			n.farEnd(c).lose(c, n.id)
			return true
		}
	}
	return false
}

// DropBeforeSubscribe arms a one-shot fault: the next subscribe over link ("" for
// any link) finds its connection gone, as if it broke right after the reconciler's
// pre-flight check.
func (n *Node) DropBeforeSubscribe(link string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropBeforeSub[link] = true
}

// dropsArmed reports whether any DropBeforeSubscribe fault is armed.
func (n *Node) dropsArmed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.dropBeforeSub) > 0
}

func (n *Node) takeDropBeforeSub(link string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range []string{link, ""} {
		if n.dropBeforeSub[k] {
			delete(n.dropBeforeSub, k)
			return true
		}
	}
	return false
}

// peer is the far end of a connection, nil when it is not (or no longer) in the fabric.
type peer struct {
	n *Node
}

// farEnd finds the node at the other end of c: the listener of its endpoint for an
// outgoing connection, the dialer for an accepted one.
func (n *Node) farEnd(c dataplane.ConnInfo) peer {
	if c.Inbound {
		return peer{n.f.Node(c.Endpoint)}
	}
	return peer{n.f.listener(c.Endpoint)}
}

// lose drops the far end's side of connection c of node from.
func (p peer) lose(c dataplane.ConnInfo, from string) {
	if p.n == nil {
		return
	}
	dp := p.n.Datapath()
	for _, fc := range dp.Connections() {
		if fc.LinkID != c.LinkID || fc.Inbound == c.Inbound {
			continue
		}
		if fc.Inbound && fc.Endpoint != from {
			continue
		}
		dp.Drop(fc.ID)
		if fc.Inbound {
			if ctrl := p.n.Controller(); ctrl != nil {
				ctrl.ReleaseClaim(fc.LinkID)
			}
		}
	}
}

// relink moves the far end's side of connection c of node from to link.
func (p peer) relink(c dataplane.ConnInfo, link, from string) {
	if p.n == nil {
		return
	}
	p.n.mu.Lock()
	up, dp, ctrl := p.n.up, p.n.dp, p.n.ctrl
	p.n.mu.Unlock()
	if !up {
		return
	}
	for _, fc := range dp.Connections() {
		if fc.Inbound && fc.LinkID == c.LinkID && fc.Endpoint == from {
			_ = dp.Relink(context.Background(), fc.ID, link)
			if ctrl != nil {
				ctrl.ReleaseClaim(c.LinkID)
				_ = ctrl.ClaimLink(dataplane.Claim{LinkID: link, Endpoint: c.Endpoint, RemoteNodeID: from})
			}
			return
		}
	}
	p.n.accept(link, from, c.Endpoint)
}

// accept is the listening side of a dial: an inbound connection and a link claim.
func (n *Node) accept(link, from, endpoint string) {
	n.mu.Lock()
	up, dp, ctrl := n.up, n.dp, n.ctrl
	n.mu.Unlock()
	if !up {
		return
	}
	dp.Accept(link, from)
	if ctrl != nil {
		_ = ctrl.ClaimLink(dataplane.Claim{LinkID: link, Endpoint: endpoint, RemoteNodeID: from})
	}
}
