package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The network nemesis (--nemesis network): three backend members (an etcd cluster,
// or a JetStream cluster holding the stream at R3) and the registrars, each in a
// network namespace of its own (netns.go); the agents, watchers and checker in the
// soak's. Each registrar reaches each member through a proxy of its own, and the
// agents reach each registrar through one of the soak's (toxics.go), so that a
// link can be made slow or lossy without breaking. A fourth lane of faults cuts,
// isolates and poisons; the crash lanes run beside it, a killed or frozen backend
// now being one member.

const (
	partition            faultKind = "partition"              // two nodes cut apart, both ways
	oneWayCut            faultKind = "one-way-cut"            // the first hears nothing from the second
	isolateMember        faultKind = "isolate-member"         // a backend member's link down
	registrarFromBackend faultKind = "registrar-from-backend" // its agents still reach it
	registrarFromAgents  faultKind = "registrar-from-agents"  // it still reaches the backend
	slowLink             faultKind = "slow-link"
	lossyLink            faultKind = "lossy-link"
	narrowLink           faultKind = "narrow-link"
)

// cutKinds are the faults that drop packets; a run with none that dropped any
// tested nothing of what the nemesis is for.
var cutKinds = map[faultKind]bool{partition: true, oneWayCut: true, registrarFromBackend: true, registrarFromAgents: true}

var toxicOf = map[faultKind]toxic{slowLink: toxicSlow, lossyLink: toxicLossy, narrowLink: toxicNarrow}

func networkLane() laneSpec {
	return laneSpec{
		name:    "network",
		gap:     [2]time.Duration{2 * time.Second, 8 * time.Second},
		kinds:   []faultKind{partition, oneWayCut, isolateMember, registrarFromBackend, registrarFromAgents, slowLink, lossyLink, narrowLink},
		weights: []int{3, 2, 2, 2, 2, 2, 1, 1},
		holds: map[faultKind][2]time.Duration{
			partition: {2 * time.Second, 12 * time.Second}, oneWayCut: {2 * time.Second, 10 * time.Second},
			isolateMember: {2 * time.Second, 12 * time.Second}, registrarFromBackend: {2 * time.Second, 10 * time.Second},
			registrarFromAgents: {2 * time.Second, 10 * time.Second}, slowLink: {5 * time.Second, 20 * time.Second},
			lossyLink: {2 * time.Second, 8 * time.Second}, narrowLink: {5 * time.Second, 15 * time.Second},
		},
	}
}

// nemesis is the network of a run and the agents' proxies.
type nemesis struct {
	net    *network
	nodes  []string   // the namespaces' names: members, then registrars
	agents []*proxies // the agents' proxy to each registrar
}

// nemesisPorts are the same in every namespace: each node has an address of its own.
const (
	clientPort    = 4000
	peerPort      = 4001
	registrarPort = 4002
	healthPort    = 4003 // a registrar's /metrics
)

// startInNamespaces starts the members and the registrars in namespaces of their
// own and returns the addresses the agents reach the registrars at (their proxies).
func (s *system) startInNamespaces() ([]string, error) {
	prefix := fmt.Sprintf("sbs%d", os.Getpid()%100000)
	n, err := newNetwork(prefix, 16+os.Getpid()%200)
	if err != nil {
		return nil, err
	}
	s.net = &nemesis{net: n}
	s.closers = append(s.closers, n.close)
	if err := s.startMembers(3); err != nil {
		return nil, err
	}
	var addrs []string
	for i := range s.o.replicas {
		name := "registrar-" + strconv.Itoa(i)
		ip, err := s.addNode(name)
		if err != nil {
			return nil, err
		}
		listen := netip.AddrPortFrom(ip, registrarPort).String()
		args := append([]string{"registrar", "-backend", s.backend, "-backend-url", s.backendURLs(),
			"-replicas", "3", "-proxied", "-listen", listen}, s.holdArgs(netip.AddrPortFrom(ip, healthPort).String())...)
		p := newProc(name, s.logDir, 3*time.Minute, args...)
		p.wrap = n.wrap(name)
		s.registrars = append(s.registrars, p)
		s.closers = append(s.closers, p.stop)
		ps := newProxies()
		s.closers = append(s.closers, ps.close)
		s.net.agents = append(s.net.agents, ps)
		addr, err := ps.add("agents-"+strconv.Itoa(i), "127.0.0.1:0", listen)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	// Side by side: a JetStream R3 stream needs its cluster's meta leader, which
	// the first registrar to come up waits for.
	return addrs, s.startAll(s.registrars)
}

// startMembers starts a backend cluster of n members, side by side (etcd's first
// leader needs a quorum).
func (s *system) startMembers(n int) error {
	kind := map[string]string{"etcd": "etcd", "jetstream": "nats"}[s.backend]
	if kind == "" {
		return fmt.Errorf("backend %q: want etcd or jetstream", s.backend)
	}
	var peers []string
	ips := make([]netip.Addr, n)
	for i := range n {
		ip, err := s.addNode(kind + "-" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		ips[i] = ip
		peers = append(peers, fmt.Sprintf("m%d=%s", i, netip.AddrPortFrom(ip, peerPort)))
	}
	for i := range n {
		name := kind + "-" + strconv.Itoa(i)
		p := newProc(name, s.logDir, 3*time.Minute, kind, "-dir", filepath.Join(s.dir, name), "-host", ips[i].String(),
			"-port", strconv.Itoa(clientPort), "-peer-port", strconv.Itoa(peerPort), "-name", fmt.Sprintf("m%d", i),
			"-peers", strings.Join(peers, ","))
		p.wrap = s.net.net.wrap(name)
		s.members = append(s.members, p)
		s.closers = append(s.closers, p.stop)
	}
	return s.startAll(s.members)
}

func (s *system) addNode(name string) (netip.Addr, error) {
	ip, err := s.net.net.add(name)
	if err == nil {
		s.net.nodes = append(s.net.nodes, name)
	}
	return ip, err
}

// nodeName is the node a fault target names: a member or a registrar, or, one past
// them, the soak's own namespace.
func (s *system) nodeName(t int) string {
	if t == len(s.net.nodes) {
		return hostNode
	}
	return s.net.nodes[t]
}

// cutsOf are the (from, to) pairs a cut fault drops packets between.
func (s *system) cutsOf(f fault) [][2]string {
	both := func(a, b string) [][2]string { return [][2]string{{a, b}, {b, a}} }
	switch f.kind {
	case partition:
		return both(s.nodeName(f.targets[0]), s.nodeName(f.targets[1]))
	case oneWayCut:
		return [][2]string{{s.nodeName(f.targets[0]), s.nodeName(f.targets[1])}}
	case registrarFromBackend:
		var out [][2]string
		for _, m := range s.members {
			out = append(out, both(s.registrars[f.targets[0]].name, m.name)...)
		}
		return out
	case registrarFromAgents:
		return both(s.registrars[f.targets[0]].name, hostNode)
	}
	return nil
}

// injectNetwork applies a network fault.
func (s *system) injectNetwork(f fault) error {
	if t, ok := toxicOf[f.kind]; ok {
		return s.poison(f, t)
	}
	if f.kind == isolateMember {
		return s.net.net.isolate(s.members[f.member].name)
	}
	var errs []error
	for _, c := range s.cutsOf(f) {
		errs = append(errs, s.net.net.cut(c[0], c[1]))
	}
	return errors.Join(errs...)
}

// healNetwork undoes a network fault and reports how many packets its cuts dropped.
func (s *system) healNetwork(f fault) (dropped int64, err error) {
	if t, ok := toxicOf[f.kind]; ok {
		return 0, s.cure(f, t)
	}
	if f.kind == isolateMember {
		return 0, s.net.net.rejoin(s.members[f.member].name)
	}
	var errs []error
	for _, c := range s.cutsOf(f) {
		n, err := s.net.net.uncut(c[0], c[1])
		dropped += n
		errs = append(errs, err)
	}
	return dropped, errors.Join(errs...)
}

// poison makes a registrar's link slow, lossy or narrow: the agents' side (targets[1]
// 0) in the soak's proxy, the backend's side (1) in the registrar's own proxies. A
// registrar restarted meanwhile comes back with clean proxies: the fault ends early.
func (s *system) poison(f fault, t toxic) error {
	if f.targets[1] == 0 {
		return s.net.agents[f.targets[0]].poison(t, f.latency)
	}
	return s.registrars[f.targets[0]].order(fmt.Sprintf("poison %s %d", t, f.latency))
}

func (s *system) cure(f fault, t toxic) error {
	if f.targets[1] == 0 {
		return s.net.agents[f.targets[0]].cure(t)
	}
	if !s.registrars[f.targets[0]].running() {
		return nil
	}
	return s.registrars[f.targets[0]].order("cure " + string(t))
}

func (s *system) describeNetwork(f fault) string {
	switch f.kind {
	case partition:
		return s.nodeName(f.targets[0]) + " <-/-> " + s.nodeName(f.targets[1])
	case oneWayCut:
		return s.nodeName(f.targets[0]) + " hears nothing from " + s.nodeName(f.targets[1])
	case isolateMember:
		return s.members[f.member].name
	case registrarFromBackend, registrarFromAgents:
		return s.registrars[f.targets[0]].name
	}
	link := s.registrars[f.targets[0]].name + "'s link to its " + map[int]string{0: "agents", 1: "backend"}[f.targets[1]]
	if f.kind == slowLink {
		link += fmt.Sprintf(" (%d ms)", f.latency)
	}
	return link
}

// healNetworkAll cures every toxic and removes every cut.
func (s *system) healNetworkAll() error {
	var errs []error
	for _, ps := range s.net.agents {
		for _, t := range toxicOf {
			errs = append(errs, ps.cure(t))
		}
	}
	for _, r := range s.registrars {
		if r.running() {
			for _, t := range toxicOf {
				errs = append(errs, r.order("cure "+string(t)))
			}
		}
	}
	return errors.Join(append(errs, s.net.net.healAll())...)
}
