package main

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// nodeTarget is the reference node: groups a and b linked directly, one node each.
type nodeTarget struct {
	f       *fabric.Fabric
	pubConn *grpc.ClientConn
	subConn *grpc.ClientConn
	pub     nodev1.NodeService_PublishStreamClient
	batch   []*nodev1.PublishRequest
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	regs    []*prometheus.Registry
	name1   *nodev1.Name
	nameFan *nodev1.Name
}

func startNodes(ctx context.Context) (target, error) {
	t := &nodeTarget{}
	f, err := fabric.Start(ctx, fabric.Options{
		Topology: "links:\n  - group: a\n    neighbors: [b]\n",
		Node: func(c *node.Config) {
			c.Metrics = prometheus.NewRegistry()
			t.regs = append(t.regs, c.Metrics)
		},
	})
	if err != nil {
		return nil, err
	}
	t.f = f
	if err := f.StartGroups(ctx, 1, "a", "b"); err != nil {
		t.close()
		return nil, err
	}
	dial := func(addr string) (*grpc.ClientConn, error) {
		// The node's buffer pool and codec on the client side too: with gRPC's
		// defaults a 1 MiB buffer is cleared for every batch (dataplane/node/bufpool.go).
		return grpc.NewClient(addr, append(node.ClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	}
	if t.pubConn, err = dial(f.Node("a/n1").Addr()); err != nil {
		t.close()
		return nil, err
	}
	if t.subConn, err = dial(f.Node("b/n1").Addr()); err != nil {
		t.close()
		return nil, err
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if t.pub, err = nodev1.NewNodeServiceClient(t.pubConn).PublishStream(t.ctx); err != nil {
		t.close()
		return nil, err
	}
	one, _ := node.ParseName("bench/dp/one")
	fan, _ := node.ParseName("bench/dp/fan")
	t.name1, t.nameFan = node.NameProto(one), node.NameProto(fan)
	return t, nil
}

func (t *nodeTarget) name() string { return "switchboard node (2 groups, link)" }

func (t *nodeTarget) subscribe(ctx context.Context, k int, got func([]byte)) error {
	name := t.name1
	if k > 1 {
		name = t.nameFan
	}
	c := nodev1.NewNodeServiceClient(t.subConn)
	for range k {
		st, err := c.Subscribe(t.ctx, &nodev1.SubscribeRequest{Name: name})
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
	// The payload buffer is reused by the caller: the batch keeps a copy.
	t.batch = append(t.batch, &nodev1.PublishRequest{Name: name, Payload: append([]byte(nil), p...), Broadcast: fan})
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
	var n float64
	for _, reg := range t.regs {
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "switchboard_node_messages_dropped_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return uint64(n)
}

func (t *nodeTarget) close() {
	if t.pub != nil {
		if _, err := t.pub.CloseAndRecv(); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "canceled") {
			_ = strconv.Quote(err.Error())
		}
	}
	if t.cancel != nil {
		t.cancel()
	}
	t.wg.Wait()
	for _, cc := range []*grpc.ClientConn{t.pubConn, t.subConn} {
		if cc != nil {
			_ = cc.Close()
		}
	}
	if t.f != nil {
		_ = t.f.Close()
	}
}
