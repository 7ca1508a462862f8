package cni

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"google.golang.org/grpc/codes"

	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

// Plugin carries out CNI commands against the agent's PodNetwork service. The zero
// value dials the agent with DialAgent, prints nothing and logs nothing.
type Plugin struct {
	Stdout io.Writer    // where ADD prints its result (the runtime reads stdout)
	Logger *slog.Logger // stderr in Main: the runtime keeps stdout for the result
	Dial   Dialer       // nil: DialAgent
}

func (p *Plugin) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}

func (p *Plugin) stdout() io.Writer {
	if p.Stdout == nil {
		return io.Discard
	}
	return p.Stdout
}

// attachment is what one ADD or CHECK is about.
type attachment struct {
	cfg  *Config
	ref  *cniv1.AttachmentRef
	pod  podArgs
	prev types.Result // prevResult as the runtime sent it, to be printed unchanged
	ips  []string
}

// Add records the pod's addresses with the agent and prints prevResult unchanged.
// An attachment that is not a Kubernetes pod's, or that has no addresses, is passed
// through without asking the agent: there is nothing to register it as.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	a, err := parseAttachment(args, "ADD")
	if err != nil {
		return err
	}
	if !a.pod.isPod() || len(a.ips) == 0 {
		p.logger().Debug("nothing to record", "container", args.ContainerID, "pod", a.pod.isPod(), "ips", len(a.ips))
		return p.printResult(a)
	}
	err = p.call(a.cfg, func(ctx context.Context, c cniv1.PodNetworkClient) error {
		_, err := c.Add(ctx, &cniv1.AddRequest{Ref: a.ref, Pod: a.pod.proto(), Netns: args.Netns, Ips: a.ips})
		return err
	})
	if err != nil {
		if err := p.addFailed(a, err); err != nil {
			return err
		}
	}
	return p.printResult(a)
}

// addFailed decides what a failed Add means for the pod: the agent's refusal of the
// request fails ADD (code 7: it recorded nothing, and a retry would be refused too);
// anything else is up to onAgentUnreachable.
func (p *Plugin) addFailed(a *attachment, err error) error {
	if code, ok := verdict(err); ok {
		if code == codes.InvalidArgument {
			return types.NewError(types.ErrInvalidNetworkConfig, "switchboard agent refused the pod: "+agentMessage(err), "")
		}
		return types.NewError(types.ErrInternal, "switchboard agent: "+agentMessage(err), "")
	}
	return p.unreachable(a.cfg, "ADD", err)
}

// unreachable applies onAgentUnreachable: allow carries on (nil), fail is code 11,
// which tells the runtime to try again later.
func (p *Plugin) unreachable(cfg *Config, cmd string, err error) error {
	if cfg.OnAgentUnreachable == PolicyAllow {
		p.logger().Warn("switchboard agent unreachable; carrying on (onAgentUnreachable: allow)",
			"command", cmd, "socket", cfg.AgentSocket, "err", agentMessage(err))
		return nil
	}
	return types.NewError(types.ErrTryAgainLater,
		fmt.Sprintf("switchboard agent unreachable on %s: %s", cfg.AgentSocket, agentMessage(err)),
		"onAgentUnreachable is fail: the runtime should retry once the agent runs")
}

// Del forgets the attachment. It succeeds whatever the agent says (or whether it
// answers at all): the spec requires DEL to succeed when things are already gone,
// and a DEL that fails keeps the pod from being deleted. An attachment the agent
// did not forget is removed by the runtime's next GC. For the same reason keys the
// plugin does not know are ignored with a warning instead of refused: the
// configuration may have grown since ADD (a newer runtime, installer or CNI spec).
func (p *Plugin) Del(args *skel.CmdArgs) error {
	cfg, ignored, err := parseConfig(args.StdinData, false)
	if err != nil {
		return err
	}
	if len(ignored) > 0 {
		p.logger().Warn("DEL: ignoring what it cannot use in the network config", "ignored", ignored)
	}
	pod, err := parseCNIArgs(args.Args)
	if err != nil {
		p.logger().Warn("ignoring CNI_ARGS on DEL", "err", err)
	}
	req := &cniv1.DelRequest{Ref: ref(cfg, args), Pod: pod.proto()}
	err = p.call(cfg, func(ctx context.Context, c cniv1.PodNetworkClient) error {
		_, err := c.Del(ctx, req)
		return err
	})
	if err != nil {
		p.logger().Warn("switchboard agent did not forget the attachment; GC will", "container", args.ContainerID,
			"ifname", args.IfName, "socket", cfg.AgentSocket, "err", agentMessage(err))
	}
	return nil
}

// Check asks the agent whether the attachment is recorded with prevResult's
// addresses. Codes: 3 (unknown container) when the agent has no such attachment,
// 999 (internal) when it has it with other addresses: the spec has no code for a
// plugin's state disagreeing with prevResult, and 999 is what skel uses for errors
// of the plugin's own.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	a, err := parseAttachment(args, "CHECK")
	if err != nil || !a.pod.isPod() || len(a.ips) == 0 {
		return err // nil when ADD recorded nothing, so there is nothing to check
	}
	err = p.call(a.cfg, func(ctx context.Context, c cniv1.PodNetworkClient) error {
		_, err := c.Check(ctx, &cniv1.CheckRequest{Ref: a.ref, Ips: a.ips})
		return err
	})
	if err == nil {
		return nil
	}
	code, ok := verdict(err)
	switch {
	case !ok:
		return p.unreachable(a.cfg, "CHECK", err)
	case code == codes.NotFound:
		return types.NewError(types.ErrUnknownContainer, "switchboard agent has no record of this attachment: "+agentMessage(err), "")
	case code == codes.InvalidArgument:
		return types.NewError(types.ErrInvalidNetworkConfig, "switchboard agent refused the check: "+agentMessage(err), "")
	}
	return types.NewError(types.ErrInternal, "switchboard agent records this attachment differently: "+agentMessage(err), "")
}

// GC tells the agent which attachments of the network the runtime still uses; the
// agent forgets the others. A GC without the list is skipped: forgetting everything
// because the runtime said nothing would deregister every pod. An agent that cannot
// be reached fails GC with code 11 whatever the policy, since the runtime simply
// runs GC again later.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	cfg, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if !cfg.HasValidAttachments {
		p.logger().Warn("GC without " + keyValidAttachments + ": skipped")
		return nil
	}
	req := &cniv1.GCRequest{Network: cfg.Net.Name}
	for _, v := range cfg.Net.ValidAttachments {
		req.Valid = append(req.Valid, &cniv1.AttachmentRef{Network: cfg.Net.Name, ContainerId: v.ContainerID, Ifname: v.IfName})
	}
	err = p.call(cfg, func(ctx context.Context, c cniv1.PodNetworkClient) error {
		_, err := c.GC(ctx, req)
		return err
	})
	if err == nil {
		return nil
	}
	if code, ok := verdict(err); ok && code == codes.InvalidArgument {
		return types.NewError(types.ErrInvalidNetworkConfig, "switchboard agent refused GC: "+agentMessage(err), "")
	}
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("switchboard agent on %s did not run GC: %s", cfg.AgentSocket, agentMessage(err)), "")
}

// Status reports whether the plugin can work. Under onAgentUnreachable fail an
// agent that does not answer makes the plugin unavailable (code 50), so the runtime
// holds off starting pods; under allow the plugin works without it.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	cfg, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	err = p.call(cfg, func(ctx context.Context, c cniv1.PodNetworkClient) error {
		_, err := c.Status(ctx, &cniv1.StatusRequest{})
		return err
	})
	if err == nil {
		return nil
	}
	if cfg.OnAgentUnreachable == PolicyAllow {
		p.logger().Warn("switchboard agent not ready; plugin available anyway (onAgentUnreachable: allow)", "socket", cfg.AgentSocket, "err", agentMessage(err))
		return nil
	}
	return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("switchboard agent not ready on %s: %s", cfg.AgentSocket, agentMessage(err)), "")
}

// parseAttachment reads what ADD and CHECK need, which both require prevResult.
func parseAttachment(args *skel.CmdArgs, cmd string) (*attachment, error) {
	cfg, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, err
	}
	if cfg.Net.PrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			"switchboard must be chained after a plugin that assigns addresses: "+cmd+" got no prevResult",
			"put switchboard last in the plugins list of a .conflist (switchboard cni install does)")
	}
	res, err := types100.NewResultFromResult(cfg.Net.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	pod, err := parseCNIArgs(args.Args)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	return &attachment{cfg: cfg, ref: ref(cfg, args), pod: pod, prev: cfg.Net.PrevResult, ips: podIPs(res)}, nil
}

func ref(cfg *Config, args *skel.CmdArgs) *cniv1.AttachmentRef {
	return &cniv1.AttachmentRef{Network: cfg.Net.Name, ContainerId: args.ContainerID, Ifname: args.IfName}
}

func (p podArgs) proto() *cniv1.Pod {
	return &cniv1.Pod{Namespace: p.Namespace, Name: p.Name, Uid: p.UID}
}

// podIPs lists the result's addresses without prefix length, once each. An address
// on a host-side interface (one with no sandbox) is not the pod's and is left out.
func podIPs(res *types100.Result) []string {
	var ips []string
	for _, ipc := range res.IPs {
		if ipc == nil || ipc.Address.IP == nil || onHost(res, ipc.Interface) {
			continue
		}
		s := canonicalIP(ipc.Address.IP)
		if !slices.Contains(ips, s) {
			ips = append(ips, s)
		}
	}
	return ips
}

func onHost(res *types100.Result, idx *int) bool {
	if idx == nil || *idx < 0 || *idx >= len(res.Interfaces) || res.Interfaces[*idx] == nil {
		return false
	}
	return res.Interfaces[*idx].Sandbox == ""
}

// canonicalIP prints an IPv4 address in dotted form even when it is held in 16 bytes.
func canonicalIP(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.String()
}

// printResult prints prevResult, unchanged, at the config's cniVersion: a chained
// plugin that changes nothing must hand the next one exactly what it got.
func (p *Plugin) printResult(a *attachment) error {
	res, err := a.prev.GetAsVersion(a.cfg.Net.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("prevResult at cniVersion %q: %v", a.cfg.Net.CNIVersion, err), "")
	}
	if err := res.PrintTo(p.stdout()); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("print result: %v", err), "")
	}
	return nil
}
