package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsTarget is the anchor: core nats-servers (no JetStream), publisher on one,
// subscribers on another.
type natsTarget struct {
	label    string
	servers  []*server.Server
	subSrv   *server.Server
	pub, sub *nats.Conn
	subConns []*nats.Conn
	subs     []*nats.Subscription
}

// startServer starts a server of cluster "anchor" joined to routes.
func startServer(routes ...*url.URL) (*server.Server, error) {
	return startWith(&server.Options{
		Cluster: server.ClusterOpts{Name: "anchor", Host: "127.0.0.1", Port: server.RANDOM_PORT},
		Routes:  routes,
	})
}

// startWith starts a server on loopback with o's cluster and gateway settings.
func startWith(o *server.Options) (*server.Server, error) {
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	s, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(time.Minute) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server not ready")
	}
	return s, nil
}

// startRoutedPair starts two servers of one cluster joined by a route.
func startRoutedPair(ctx context.Context) (s1, s2 *server.Server, err error) {
	if s1, err = startServer(); err != nil {
		return nil, nil, err
	}
	route, err := url.Parse(fmt.Sprintf("nats-route://%s", s1.ClusterAddr()))
	if err != nil {
		s1.Shutdown()
		return nil, nil, err
	}
	if s2, err = startServer(route); err != nil {
		s1.Shutdown()
		return nil, nil, err
	}
	if err := waitFor(ctx, func() bool { return s1.NumRoutes() > 0 && s2.NumRoutes() > 0 }); err != nil {
		s2.Shutdown()
		s1.Shutdown()
		return nil, nil, fmt.Errorf("route: %w", err)
	}
	return s1, s2, nil
}

func startNATS(ctx context.Context) (target, error) {
	s1, s2, err := startRoutedPair(ctx)
	if err != nil {
		return nil, err
	}
	return newNATSTarget("NATS core (2 servers, route)", []*server.Server{s1, s2}, s1, s2)
}

// startNATSGateways starts two clusters of one server each, joined by a gateway:
// client -> server A -> gateway -> server B -> client.
func startNATSGateways(ctx context.Context) (target, string, error) {
	gw := func(name string, remotes ...*server.RemoteGatewayOpts) *server.Options {
		return &server.Options{
			Cluster: server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: server.RANDOM_PORT},
			Gateway: server.GatewayOpts{Name: name, Host: "127.0.0.1", Port: server.RANDOM_PORT, Gateways: remotes},
		}
	}
	a, err := startWith(gw("A"))
	if err != nil {
		return nil, "", err
	}
	aURL, err := url.Parse(fmt.Sprintf("nats://%s", a.GatewayAddr()))
	if err != nil {
		a.Shutdown()
		return nil, "", err
	}
	b, err := startWith(gw("B", &server.RemoteGatewayOpts{Name: "A", URLs: []*url.URL{aURL}}))
	if err != nil {
		a.Shutdown()
		return nil, "", err
	}
	if err := waitFor(ctx, func() bool { return a.NumOutboundGateways() > 0 && b.NumOutboundGateways() > 0 }); err != nil {
		b.Shutdown()
		a.Shutdown()
		return nil, "", fmt.Errorf("gateway: %w", err)
	}
	t, err := newNATSTarget("NATS core (2 clusters, gateway)", []*server.Server{a, b}, a, b)
	return t, "client → A → gateway → B → client", err
}

// startNATSLeaves starts a hub and two leaf-node servers connected to it, NATS's own
// edge -> cloud -> edge shape: client -> leaf edge-a -> hub -> leaf edge-b -> client.
func startNATSLeaves(ctx context.Context) (target, string, error) {
	return startLeafShape(ctx, 1)
}

// startNATSLeavesHubPair is the same shape with a hub of two servers joined by a route,
// each leaf on a hub server of its own: client -> leaf -> hub 1 -> route -> hub 2 ->
// leaf -> client, four servers, as the node's path is when cloud's two links are held
// by different nodes.
func startNATSLeavesHubPair(ctx context.Context) (target, string, error) {
	return startLeafShape(ctx, 2)
}

// startLeafShape starts a hub of hubs servers (one cluster) and two leaf nodes, the
// first connected to the first hub server, the second to the last.
func startLeafShape(ctx context.Context, hubs int) (target, string, error) {
	var servers []*server.Server
	var leafURLs []*url.URL
	for i := range hubs {
		o := &server.Options{LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: server.RANDOM_PORT}}
		if hubs > 1 {
			o.Cluster = server.ClusterOpts{Name: "hub", Host: "127.0.0.1", Port: server.RANDOM_PORT}
		}
		if i > 0 {
			route, err := url.Parse(fmt.Sprintf("nats-route://%s", servers[0].ClusterAddr()))
			if err != nil {
				shutdown(servers)
				return nil, "", err
			}
			o.Routes = []*url.URL{route}
		}
		hub, err := startWith(o)
		if err != nil {
			shutdown(servers)
			return nil, "", err
		}
		servers = append(servers, hub)
		// The server writes the port it bound back into its options.
		u, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", o.LeafNode.Port))
		if err != nil {
			shutdown(servers)
			return nil, "", err
		}
		leafURLs = append(leafURLs, u)
	}
	for _, u := range []*url.URL{leafURLs[0], leafURLs[hubs-1]} {
		leaf, err := startWith(&server.Options{LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}})
		if err != nil {
			shutdown(servers)
			return nil, "", err
		}
		servers = append(servers, leaf)
	}
	first, last, leafA, leafB := servers[0], servers[hubs-1], servers[hubs], servers[hubs+1]
	if err := waitFor(ctx, func() bool {
		leaves := first.NumLeafNodes() == 2
		if hubs > 1 {
			leaves = first.NumLeafNodes() == 1 && last.NumLeafNodes() == 1 && first.NumRoutes() > 0 && last.NumRoutes() > 0
		}
		return leaves && leafA.NumLeafNodes() == 1 && leafB.NumLeafNodes() == 1
	}); err != nil {
		shutdown(servers)
		return nil, "", fmt.Errorf("leaf nodes: %w", err)
	}
	if hubs == 1 {
		t, err := newNATSTarget("NATS core (hub and 2 leaf nodes)", servers, leafA, leafB)
		return t, "client → leaf → hub → leaf → client", err
	}
	t, err := newNATSTarget("NATS core (hub of 2 routed servers and 2 leaf nodes)", servers, leafA, leafB)
	return t, "client → leaf → hub 1 → route → hub 2 → leaf → client", err
}

// newNATSTarget connects the publisher to pubSrv and the subscriber to subSrv.
func newNATSTarget(label string, servers []*server.Server, pubSrv, subSrv *server.Server) (target, error) {
	t := &natsTarget{label: label, servers: servers, subSrv: subSrv}
	var err error
	if t.pub, err = nats.Connect(pubSrv.ClientURL()); err != nil {
		t.close()
		return nil, err
	}
	if t.sub, err = nats.Connect(subSrv.ClientURL()); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *natsTarget) name() string { return t.label }

func (t *natsTarget) subscribe(_ context.Context, k int, got func([]byte)) error {
	subject := "bench.one"
	if k > 1 {
		subject = "bench.fan"
	}
	for range k {
		// Each fan-out subscriber has a connection of its own, as separate clients do.
		nc := t.sub
		if k > 1 {
			var err error
			if nc, err = nats.Connect(t.subSrv.ClientURL()); err != nil {
				return err
			}
			t.subConns = append(t.subConns, nc)
		}
		s, err := nc.Subscribe(subject, func(m *nats.Msg) { got(m.Data) })
		if err != nil {
			return err
		}
		_ = s.SetPendingLimits(-1, -1)
		t.subs = append(t.subs, s)
		if err := nc.Flush(); err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
	}
	return nil
}

func (t *natsTarget) publish(p []byte, fan bool) error {
	if fan {
		return t.pub.Publish("bench.fan", p)
	}
	return t.pub.Publish("bench.one", p)
}

// flush is a no-op: the NATS client flushes its buffer by itself as soon as it can.
func (t *natsTarget) flush() error { return nil }

func (t *natsTarget) dropped() uint64 {
	var n uint64
	for _, s := range t.subs {
		if d, err := s.Dropped(); err == nil {
			n += uint64(d)
		}
	}
	return n
}

func (t *natsTarget) close() {
	for _, nc := range append(t.subConns, t.pub, t.sub) {
		if nc != nil {
			nc.Close()
		}
	}
	shutdown(t.servers)
}

// shutdown stops servers, the last started first.
func shutdown(servers []*server.Server) {
	for i := len(servers) - 1; i >= 0; i-- {
		if servers[i] != nil {
			servers[i].Shutdown()
		}
	}
}
