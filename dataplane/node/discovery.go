package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// self is the node's own registry entry: service switchboard-node in the cluster named
// after its group, at its internal endpoint.
func (n *Node) self() (endpoint.Endpoint, error) {
	host, portStr, err := net.SplitHostPort(n.cfg.Endpoint)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("endpoint %q: want host:port: %w", n.cfg.Endpoint, err)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("endpoint %q: the registry needs an IP address, not %q", n.cfg.Endpoint, host)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("endpoint %q: port %q is not a number", n.cfg.Endpoint, portStr)
	}
	e := endpoint.Endpoint{
		Cluster: n.cfg.Group, Service: ServiceName, Protocol: "grpc", Address: addr.String(), Port: port,
		Node: n.cfg.NodeID, Priority: 1, TTL: endpoint.TTL(n.cfg.RegistrationTTL),
	}
	return e, nil
}

// discover keeps the node registered and a peering open to every other node of its
// group, until ctx ends.
func (n *Node) discover(ctx context.Context) {
	me, err := n.self()
	if err != nil {
		n.cfg.Logger.Error("not registering in the registry", "node", n.id, "err", err)
	} else {
		n.wg.Go(func() { n.keepRegistered(ctx, me) })
	}
	f := endpoint.Filter{Cluster: n.cfg.Group, Service: ServiceName}
	if w, ok := n.cfg.Registry.(registry.Watcher); ok {
		if n.watchPeers(ctx, w, f) {
			return
		}
	}
	n.pollPeers(ctx, f)
}

func (n *Node) keepRegistered(ctx context.Context, me endpoint.Endpoint) {
	t := time.NewTicker(n.cfg.RegistrationTTL / 3)
	defer t.Stop()
	for {
		if err := n.cfg.Registry.Apply(ctx, []registry.Op{registry.Register(me)}); err != nil && ctx.Err() == nil {
			n.cfg.Logger.Warn("registry registration failed; retrying", "node", n.id, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) unregisterSelf() {
	me, err := n.self()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := n.cfg.Registry.Apply(ctx, []registry.Op{registry.Unregister(me)}); err != nil {
		n.cfg.Logger.Warn("registry unregistration failed", "node", n.id, "err", err)
	}
}

// watchPeers follows the group's entries; false when the watch could not start or
// ended before ctx (the caller polls instead).
func (n *Node) watchPeers(ctx context.Context, w registry.Watcher, f endpoint.Filter) bool {
	for ctx.Err() == nil {
		events, err := w.Watch(ctx, f)
		if err != nil {
			n.cfg.Logger.Warn("registry watch failed; polling instead", "node", n.id, "err", err)
			return false
		}
		for ev := range events {
			switch ev.Type {
			case registry.Added, registry.Updated:
				n.ensurePeer(ev.Endpoint)
			case registry.Removed:
				n.dropPeer(ev.Endpoint)
			}
		}
		if ctx.Err() == nil {
			time.Sleep(n.backoff(1))
		}
	}
	return true
}

func (n *Node) pollPeers(ctx context.Context, f endpoint.Filter) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	known := map[endpoint.Key]endpoint.Endpoint{}
	for {
		eps, err := n.cfg.Registry.List(ctx, f)
		if err == nil {
			seen := map[endpoint.Key]bool{}
			for _, e := range eps {
				seen[e.Key()] = true
				known[e.Key()] = e
				n.ensurePeer(e)
			}
			for k, e := range known {
				if !seen[k] {
					delete(known, k)
					n.dropPeer(e)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func peerAddr(e endpoint.Endpoint) string {
	return net.JoinHostPort(e.Address, strconv.Itoa(e.Port))
}

// ensurePeer opens (or re-aims) the peering to the node behind entry e.
func (n *Node) ensurePeer(e endpoint.Endpoint) {
	if e.Node == "" || e.Node == n.cfg.NodeID {
		return
	}
	remote := n.cfg.Group + "/" + e.Node
	addr := peerAddr(e)
	n.annMu.Lock()
	defer n.annMu.Unlock()
	n.mu.Lock()
	old := n.peers[remote]
	if old != nil && old.endpoint == addr {
		n.mu.Unlock()
		return
	}
	if n.ctx.Err() != nil {
		n.mu.Unlock()
		return
	}
	c := n.newConn(peerOut, "", addr, remote)
	n.nextConn++
	c.id = n.nextConn
	n.conns[c.id] = c
	n.peers[remote] = c
	for name, o := range n.offers {
		c.setInterest(name, o.local > 0, nil)
	}
	n.mu.Unlock()
	if old != nil {
		go n.removeConn(old)
	}
	n.cfg.Logger.Info("peering with a node of the group", "node", n.id, "peer", remote, "endpoint", addr)
	n.wg.Go(func() { n.dialLoop(c, nil) })
}

// dropPeer closes the peering to the node behind entry e, if it still points there.
func (n *Node) dropPeer(e endpoint.Endpoint) {
	remote := n.cfg.Group + "/" + e.Node
	n.mu.Lock()
	c := n.peers[remote]
	n.mu.Unlock()
	if c != nil && c.endpoint == peerAddr(e) {
		n.removeConn(c)
	}
}
