package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/dataplane/node/fabric"
	"github.com/switchboard-mesh/switchboard/registry"
)

// devFabricOptions shape the data-plane fabric dev runs: three groups of two nodes in
// a star around "cloud".
type devFabricOptions struct {
	basePort int
	off      bool
}

var devGroups = []string{"cloud", "edge-a", "edge-b"}

const devNodesPerGroup = 2

func (o *devFabricOptions) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&o.basePort, "nodes-base-port", 46357, "first port of the six data-plane nodes (cloud/n1, cloud/n2, edge-a/n1, ...); each takes the next")
	cmd.Flags().BoolVar(&o.off, "no-nodes", false, "run no data-plane nodes")
}

// devFabric is the running data-plane fabric ("none" when turned off).
type devFabric struct {
	f   *fabric.Fabric
	reg registry.Registry
}

// startDevFabric links the groups in segment "dev" (cloud <-> edge-a, cloud <-> edge-b)
// and starts two nodes per group against dev's control plane; they find each other
// through dev's JetStream registry.
func startDevFabric(ctx context.Context, a *app, o devFabricOptions, natsURL string, cp *server.Server, log *slog.Logger) (*devFabric, error) {
	if o.off {
		return &devFabric{}, nil
	}
	svc := cp.Service()
	res, err := svc.AddSegment(ctx, "dev")
	if err != nil {
		return nil, fmt.Errorf("dev fabric: segment: %w", err)
	}
	cp.Enqueue(res)
	for _, g := range devGroups[1:] {
		res, err := svc.AddSegmentLink(ctx, "dev", devGroups[0], g)
		if err != nil {
			return nil, fmt.Errorf("dev fabric: link %s <-> %s: %w", devGroups[0], g, err)
		}
		cp.Enqueue(res)
	}
	reg, err := registry.Open(ctx, "jetstream", map[string]string{"nats-url": natsURL}, log.With("component", "node-registry"))
	if err != nil {
		return nil, fmt.Errorf("dev fabric: registry: %w", err)
	}
	ports := map[string]int{}
	for i, g := range devGroups {
		for k := 1; k <= devNodesPerGroup; k++ {
			ports[fmt.Sprintf("%s/n%d", g, k)] = o.basePort + i*devNodesPerGroup + k - 1
		}
	}
	f, err := fabric.Start(ctx, fabric.Options{
		Southbound: cp.SouthboundAddr(), Registry: reg, Logger: a.loggerAtLeast(slog.LevelWarn),
		Listen: func(group, id string) string {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[group+"/"+id]))
		},
	})
	if err != nil {
		_ = reg.Close()
		return nil, err
	}
	d := &devFabric{f: f, reg: reg}
	if err := f.StartGroups(ctx, devNodesPerGroup, devGroups...); err != nil {
		return nil, errors.Join(fmt.Errorf("dev fabric: %w (move the nodes with --nodes-base-port, or --no-nodes)", err), d.stop())
	}
	fmt.Fprintf(a.out, "  Data plane      segment dev: cloud <-> edge-a, cloud <-> edge-b; nodes (switchboard sub/pub --node ADDR):\n")
	for _, r := range f.Nodes() {
		fmt.Fprintf(a.out, "                  %-10s %s\n", r.ID(), r.Addr())
	}
	return d, nil
}

func (d *devFabric) stop() error {
	if d == nil || d.f == nil {
		return nil
	}
	return errors.Join(d.f.Close(), d.reg.Close())
}
