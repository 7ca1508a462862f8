package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// network puts the soak's children in network namespaces of their own, each joined
// by a veth pair to one bridge in the soak's namespace ("host", where the agents,
// watchers and checker run), so that the nemesis can cut them apart for real:
//
//   - a cut from A to B drops, silently, every packet A receives from B (iptables in
//     A's namespace). Cutting both ways is a partition; one way, A still reaches B
//     but hears nothing back, which is what a half-broken firewall or route does.
//   - isolating a node takes its link down: it reaches nobody, not even the host.
//
// tc netem is not available on every kernel (not on this one), so slowness is the
// job of the proxies in the path (toxics.go), not of the links. Everything this
// creates is named after the network's prefix and removed by close, which also
// runs at the start of a run with the same prefix left behind by a killed soak.
type network struct {
	prefix string
	bridge string
	subnet netip.Prefix // a /24; the host is .1

	mu    sync.Mutex
	nodes map[string]*netNode
	next  int
	cuts  map[[2]string]bool // from, to: packets to "from" from "to" are dropped
}

// netNode is one namespace: one child process (or a restart of it) lives there.
type netNode struct {
	name string
	ns   string
	veth string // the host end
	ip   netip.Addr
	down bool
}

// hostNode names the soak's own namespace in cuts.
const hostNode = "host"

// newNetwork creates the bridge. prefix must be short (interface names are at most
// 15 bytes) and unique to the run; octet picks the subnet 10.213.octet.0/24.
func newNetwork(prefix string, octet int) (*network, error) {
	n := &network{prefix: prefix, bridge: prefix + "br", nodes: map[string]*netNode{}, next: 2, cuts: map[[2]string]bool{},
		subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(octet), 0}), 24)}
	n.removeLeftovers()
	host := n.hostIP()
	err := run("ip", "link", "add", n.bridge, "type", "bridge")
	if err == nil {
		err = run("ip", "addr", "add", host.String()+"/24", "dev", n.bridge)
	}
	if err == nil {
		err = run("ip", "link", "set", n.bridge, "up")
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("network %s: %w", prefix, err)
	}
	return n, nil
}

func (n *network) hostIP() netip.Addr { return n.subnet.Addr().Next() }

// add creates a namespace for name, linked to the bridge, and returns its address.
func (n *network) add(name string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd := n.nodes[name]; nd != nil {
		return nd.ip, nil
	}
	ip := n.subnet.Addr()
	for range n.next {
		ip = ip.Next()
	}
	nd := &netNode{name: name, ns: fmt.Sprintf("%s-%d", n.prefix, n.next), veth: fmt.Sprintf("%sv%d", n.prefix, n.next), ip: ip}
	n.next++
	steps := [][]string{
		{"ip", "netns", "add", nd.ns},
		{"ip", "link", "add", nd.veth, "type", "veth", "peer", "name", "eth0", "netns", nd.ns},
		{"ip", "link", "set", nd.veth, "master", n.bridge, "up"},
		{"ip", "-n", nd.ns, "addr", "add", ip.String() + "/24", "dev", "eth0"},
		{"ip", "-n", nd.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", nd.ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return netip.Addr{}, fmt.Errorf("namespace for %s: %w", name, err)
		}
	}
	n.nodes[name] = nd
	return ip, nil
}

// wrap is the command prefix that runs a program in name's namespace. ip netns exec
// execs the program, so the process keeps its pid and signals reach it.
func (n *network) wrap(name string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return []string{"ip", "netns", "exec", n.nodes[name].ns}
}

// cut drops what from receives from to (to may be hostNode). Cutting both ways is
// cut(a, b) and cut(b, a).
func (n *network) cut(from, to string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := [2]string{from, to}
	if n.cuts[key] {
		return nil
	}
	ns, rule, err := n.ruleArgs(from, to)
	if err != nil {
		return err
	}
	if err := run(append([]string{"ip", "netns", "exec", ns, "iptables", "-I"}, rule...)...); err != nil {
		return err
	}
	n.cuts[key] = true
	return nil
}

// uncut undoes cut and reports how many packets the cut dropped; undoing what was
// not cut does nothing.
func (n *network) uncut(from, to string) (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := [2]string{from, to}
	if !n.cuts[key] {
		return 0, nil
	}
	ns, rule, err := n.ruleArgs(from, to)
	if err != nil {
		return 0, err
	}
	dropped := dropCount(ns, rule)
	if err := run(append([]string{"ip", "netns", "exec", ns, "iptables", "-D"}, rule...)...); err != nil {
		return dropped, err
	}
	delete(n.cuts, key)
	return dropped, nil
}

// dropCount reads the packet counter of a DROP rule (0 if it cannot): iptables -S -v
// prints it as "-c PACKETS BYTES".
func dropCount(ns string, rule []string) int64 {
	out, err := exec.Command("ip", "netns", "exec", ns, "iptables", "-S", rule[0], "-v").Output()
	if err != nil {
		return 0
	}
	addr := rule[2] + "/32"
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if !slices.Contains(f, addr) || !slices.Contains(f, "DROP") {
			continue
		}
		if i := slices.Index(f, "-c"); i >= 0 && i+1 < len(f) {
			n, _ := strconv.ParseInt(f[i+1], 10, 64)
			return n
		}
	}
	return 0
}

// ruleArgs is the namespace and iptables rule (chain first) that drop what from
// receives from to: an INPUT rule in from's namespace, or, when from is the host
// (whose own tables the soak leaves alone), an OUTPUT rule in to's.
func (n *network) ruleArgs(from, to string) (string, []string, error) {
	if from == hostNode {
		t := n.nodes[to]
		if t == nil {
			return "", nil, fmt.Errorf("cut: no node %q", to)
		}
		return t.ns, []string{"OUTPUT", "-d", n.hostIP().String(), "-j", "DROP"}, nil
	}
	f := n.nodes[from]
	if f == nil {
		return "", nil, fmt.Errorf("cut: no node %q", from)
	}
	src := n.hostIP()
	if to != hostNode {
		t := n.nodes[to]
		if t == nil {
			return "", nil, fmt.Errorf("cut: no node %q", to)
		}
		src = t.ip
	}
	return f.ns, []string{"INPUT", "-s", src.String(), "-j", "DROP"}, nil
}

// isolate takes name's link down (up again with rejoin): it reaches nobody.
func (n *network) isolate(name string) error { return n.setLink(name, "down") }

func (n *network) rejoin(name string) error { return n.setLink(name, "up") }

func (n *network) setLink(name, state string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.nodes[name]
	if nd == nil {
		return fmt.Errorf("no node %q", name)
	}
	if err := run("ip", "link", "set", nd.veth, state); err != nil {
		return err
	}
	nd.down = state == "down"
	if state == "up" {
		return waitOperUp(nd.veth, 3*time.Second)
	}
	return nil
}

// waitOperUp waits until link's operational state is up: "ip link set up" returns
// before the veth has its carrier, and a datagram sent in between is dropped (the
// heal would not be one yet).
func waitOperUp(link string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile("/sys/class/net/" + link + "/operstate")
		if err == nil && strings.TrimSpace(string(b)) == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link %s not up %s after it was set up (operstate %q, %v)", link, limit, strings.TrimSpace(string(b)), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healAll removes every cut and brings every link up.
func (n *network) healAll() error {
	n.mu.Lock()
	var cuts [][2]string
	for c := range n.cuts {
		cuts = append(cuts, c)
	}
	var down []string
	for name, nd := range n.nodes {
		if nd.down {
			down = append(down, name)
		}
	}
	n.mu.Unlock()
	var errs []error
	for _, c := range cuts {
		_, err := n.uncut(c[0], c[1])
		errs = append(errs, err)
	}
	for _, name := range down {
		errs = append(errs, n.rejoin(name))
	}
	return errors.Join(errs...)
}

// close deletes every namespace and the bridge (their veths go with them).
func (n *network) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nd := range n.nodes {
		_ = run("ip", "netns", "del", nd.ns)
	}
	n.nodes = map[string]*netNode{}
	_ = run("ip", "link", "del", n.bridge)
}

// removeLeftovers deletes namespaces and a bridge of this prefix that a soak killed
// before its cleanup left behind.
func (n *network) removeLeftovers() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], n.prefix+"-") {
			_ = run("ip", "netns", "del", f[0])
		}
	}
	if exec.Command("ip", "link", "show", n.bridge).Run() == nil {
		_ = run("ip", "link", "del", n.bridge)
	}
}

// networkUsable says why namespaces cannot be used here, or "" when they can.
func networkUsable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is missing (apt-get install iproute2 iptables)"
		}
	}
	return ""
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
