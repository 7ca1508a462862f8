package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/registry"
)

// devFabricOptions shape the data-plane fabric dev runs: three groups of two nodes in
// a star around "cloud".
type devFabricOptions struct {
	basePort int
	off      bool
	// anyPortIfTaken: the base is the default, so taken ports move the nodes to
	// ports the system picks rather than failing dev.
	anyPortIfTaken bool
}

// defaultNodesBasePort is the first node's port (the data-plane port SLIM's nodes
// use); the others take the next five.
var defaultNodesBasePort = 46357

var devGroups = []string{"cloud", "edge-a", "edge-b"}

const devNodesPerGroup = 2

func (o *devFabricOptions) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&o.basePort, "nodes-base-port", defaultNodesBasePort, "first port of the six data-plane nodes (cloud/n1, cloud/n2, edge-a/n1, ...); each takes the next (left at the default, taken ports move the nodes to ports the system picks)")
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
	ports := o.ports(log)
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
	return d, nil
}

// printBanner prints the nodes' part of dev's banner; none when they are off.
func (d *devFabric) printBanner(out io.Writer) {
	if d.f == nil {
		return
	}
	fmt.Fprintf(out, "  Data plane      segment dev: cloud <-> edge-a, cloud <-> edge-b; nodes (switchboard sub/pub --node ADDR):\n")
	for _, r := range d.f.Nodes() {
		fmt.Fprintf(out, "                  %-10s %s\n", r.ID(), r.Addr())
	}
}

// nodePorts maps each node (group/id) to its port from base.
func nodePorts(base int) map[string]int {
	ports := map[string]int{}
	for i, g := range devGroups {
		for k := 1; k <= devNodesPerGroup; k++ {
			ports[fmt.Sprintf("%s/n%d", g, k)] = base + i*devNodesPerGroup + k - 1
		}
	}
	return ports
}

// checkPorts fails if one of the nodes' ports is taken, naming it and the flag.
func (o devFabricOptions) checkPorts() error {
	if o.off {
		return nil
	}
	var pairs []string
	for _, port := range nodePorts(o.basePort) {
		pairs = append(pairs, "nodes-base-port", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	return probeListens(pairs...)
}

// ports are the nodes' ports: from the base, or all 0 (the system picks) when the
// default base has one taken, checked right before the nodes bind them. The
// default ports lie in the range Linux gives outgoing connections their ports
// from, and a closed connection keeps its port for a minute: any program's
// traffic can take one for a while. A base the user chose was checked before
// anything started (runDev).
func (o devFabricOptions) ports(log *slog.Logger) map[string]int {
	if !o.anyPortIfTaken {
		return nodePorts(o.basePort)
	}
	if err := o.checkPorts(); err != nil {
		log.Warn("the data-plane nodes' default ports are taken; they listen on ports the system picks instead (printed below)", "err", err)
		return map[string]int{}
	}
	return nodePorts(o.basePort)
}

func (d *devFabric) stop() error {
	if d == nil || d.f == nil {
		return nil
	}
	return errors.Join(d.f.Close(), d.reg.Close())
}
