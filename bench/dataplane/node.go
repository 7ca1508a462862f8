package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// nodeFabric is a fabric of reference nodes whose metrics the bench reads.
type nodeFabric struct {
	f    *fabric.Fabric
	regs []*prometheus.Registry
}

// linkTransport is the nodes' link transport (-link-transport).
var linkTransport = node.TransportFramed

// startFabric starts a control plane with topology and perGroup nodes in each group.
func startFabric(ctx context.Context, topology string, perGroup int, groups ...string) (*nodeFabric, error) {
	nf := &nodeFabric{}
	f, err := fabric.Start(ctx, fabric.Options{
		Topology: topology,
		Node: func(c *node.Config) {
			c.Metrics = prometheus.NewRegistry()
			c.LinkTransport = linkTransport
			nf.regs = append(nf.regs, c.Metrics)
		},
	})
	if err != nil {
		return nil, err
	}
	nf.f = f
	if err := f.StartGroups(ctx, perGroup, groups...); err != nil {
		nf.close()
		return nil, err
	}
	return nf, nil
}

// counter sums metric's values over every node, of the label values match accepts
// (nil: all).
func (nf *nodeFabric) counter(metric string, match func(labels map[string]string) bool) uint64 {
	var n float64
	for _, reg := range nf.regs {
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != metric {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if match == nil || match(labels) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return uint64(n)
}

func (nf *nodeFabric) close() {
	if nf.f != nil {
		_ = nf.f.Close()
	}
}

// clientTransport is how the bench's clients call the node's API: "framed" (the
// framed transport, a connection per call) or "grpc".
var clientTransport = "framed"

// clientConn is a client's connection to a node, on either transport.
type clientConn interface {
	grpc.ClientConnInterface
	Close() error
}

// dial connects a client to a node. On gRPC, with the node's buffer pool and codec
// on the client side too: with gRPC's defaults a 1 MiB buffer is cleared for every
// batch (dataplane/node/bufpool.go).
func dial(addr string) (clientConn, error) {
	if clientTransport == "framed" {
		return node.NewFramedClient(addr, node.FramedOptions{}), nil
	}
	return grpc.NewClient(addr, append(node.ClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
}

func mustName(s string) *nodev1.Name {
	n, err := node.ParseName(s)
	if err != nil {
		panic(err)
	}
	return node.NameProto(n)
}

// nodeTarget is a publisher on one node of a fabric and subscribers on another.
type nodeTarget struct {
	label   string
	nf      *nodeFabric
	pubConn clientConn
	subConn clientConn
	subAddr string
	// fanConns are the fan-out subscribers' connections, one each.
	fanConns []clientConn
	pub      nodev1.NodeService_PublishStreamClient
	batch    []*nodev1.PublishRequest
	spare    []*nodev1.PublishRequest // the requests batch reuses
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	name1    *nodev1.Name
	nameFan  *nodev1.Name
}

// startNodes: groups a and b linked directly, one node each.
func startNodes(ctx context.Context) (target, error) {
	nf, err := startFabric(ctx, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	if err != nil {
		return nil, err
	}
	return newNodeTarget("switchboard node (2 groups, link)", nf, "a/n1", "b/n1")
}

// devTopology is the shape `switchboard dev` runs: cloud linked to both edges in
// segment dev, two nodes per group.
const devTopology = "segments:\n  - name: dev\n    links:\n      - group: cloud\n        neighbors: [edge-a, edge-b]\n"

// startNodeHops starts dev's shape and puts the publisher on the edge-a node holding
// the link to cloud and the subscriber on the edge-b node holding its link: client ->
// edge-a gateway -> link -> cloud (one node, or two and a peering) -> link -> edge-b
// gateway -> client.
func startNodeHops(ctx context.Context) (target, string, error) {
	nf, err := startFabric(ctx, devTopology, 2, "cloud", "edge-a", "edge-b")
	if err != nil {
		return nil, "", err
	}
	var gwA, gwB, cloudA, cloudB string
	if err := waitFor(ctx, func() bool {
		gwA, cloudA = gateway(nf.f, "edge-a")
		gwB, cloudB = gateway(nf.f, "edge-b")
		return cloudA != "" && cloudB != ""
	}); err != nil {
		nf.close()
		return nil, "", fmt.Errorf("links edge-a/edge-b <-> cloud: %w", err)
	}
	path := "client → " + gwA + " → " + cloudA
	if cloudB != cloudA {
		path += " → (peering) " + cloudB
	}
	path += " → " + gwB + " → client"
	t, err := newNodeTarget("switchboard node (edge → cloud → edge, 2 nodes per group)", nf, gwA, gwB)
	return t, path, err
}

// gateway finds the node of group holding a link and the node at the link's other end.
func gateway(f *fabric.Fabric, group string) (edge, far string) {
	links := map[string]string{} // link id -> node
	for _, r := range f.Nodes() {
		if r.Group == group {
			continue
		}
		for _, c := range r.Connections() {
			if c.LinkID != "" {
				links[c.LinkID] = r.ID()
			}
		}
	}
	for _, r := range f.Nodes() {
		if r.Group != group {
			continue
		}
		for _, c := range r.Connections() {
			if n := links[c.LinkID]; c.LinkID != "" && n != "" {
				return r.ID(), n
			}
		}
	}
	return "", ""
}

func newNodeTarget(label string, nf *nodeFabric, pubID, subID string) (target, error) {
	t := &nodeTarget{label: label, nf: nf}
	var err error
	if t.pubConn, err = dial(nf.f.Node(pubID).Addr()); err != nil {
		t.close()
		return nil, err
	}
	t.subAddr = nf.f.Node(subID).Addr()
	if t.subConn, err = dial(t.subAddr); err != nil {
		t.close()
		return nil, err
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if t.pub, err = nodev1.NewNodeServiceClient(t.pubConn).PublishStream(t.ctx); err != nil {
		t.close()
		return nil, err
	}
	t.name1, t.nameFan = mustName("bench/dp/one"), mustName("bench/dp/fan")
	return t, nil
}

func (t *nodeTarget) name() string { return t.label }

func (t *nodeTarget) subscribe(ctx context.Context, k int, got func([]byte)) error {
	name := t.name1
	if k > 1 {
		name = t.nameFan
	}
	for range k {
		// Each fan-out subscriber has a connection of its own, as separate clients do
		// (and as the NATS anchor's do).
		cc := t.subConn
		if k > 1 {
			var err error
			if cc, err = dial(t.subAddr); err != nil {
				return err
			}
			t.fanConns = append(t.fanConns, cc)
		}
		st, err := nodev1.NewNodeServiceClient(cc).Subscribe(t.ctx, &nodev1.SubscribeRequest{Name: name})
		if err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
		t.wg.Go(func() {
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				for _, m := range r.GetMessages() {
					got(m.GetPayload())
				}
			}
		})
	}
	return ctx.Err()
}

func (t *nodeTarget) publish(p []byte, fan bool) error {
	name := t.name1
	if fan {
		name = t.nameFan
	}
	return t.publishTo(name, p, fan)
}

func (t *nodeTarget) publishTo(name *nodev1.Name, p []byte, broadcast bool) error {
	// The payload buffer is reused by the caller: the batch keeps a copy. A batch is
	// marshalled within Send, so its requests and their payload buffers serve the
	// next batch too (as a NATS client copies into its write buffer, without
	// allocating).
	i := len(t.batch)
	if i == len(t.spare) {
		t.spare = append(t.spare, &nodev1.PublishRequest{})
	}
	r := t.spare[i]
	r.Name, r.Broadcast, r.Payload = name, broadcast, append(r.Payload[:0], p...)
	t.batch = append(t.batch, r)
	if len(t.batch) >= 64 {
		return t.flush()
	}
	return nil
}

func (t *nodeTarget) flush() error {
	if len(t.batch) == 0 {
		return nil
	}
	err := t.pub.Send(&nodev1.PublishBatch{Messages: t.batch})
	t.batch = t.batch[:0]
	return err
}

// dropped sums every node's counted drops, of every reason.
func (t *nodeTarget) dropped() uint64 {
	return t.nf.counter("switchboard_node_messages_dropped_total", nil)
}

func (t *nodeTarget) close() {
	if t.pub != nil {
		// The stream's summary is of no interest here; wait for it a while so the
		// node sees a clean end.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = t.pub.CloseAndRecv()
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	if t.cancel != nil {
		t.cancel()
	}
	t.wg.Wait()
	for _, cc := range append(t.fanConns, t.pubConn, t.subConn) {
		if cc != nil {
			_ = cc.Close()
		}
	}
	t.nf.close()
}
