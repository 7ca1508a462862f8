package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireNetwork skips the test unless namespaces can be made here; with
// CI_REQUIRE_CNI set (CI sets it for every test that needs namespaces) it fails.
func requireNetwork(t *testing.T) {
	t.Helper()
	why := networkUsable()
	if why == "" {
		return
	}
	if os.Getenv("CI_REQUIRE_CNI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// inNamespace runs f on a thread inside namespace ns; sockets f creates stay there.
func inNamespace(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(err) // a thread left in the wrong namespace must not be reused
		}
	}()
	f()
}

// udpProbe sends a datagram from namespace from (or the host) to the listener
// and reports whether it arrived within 300 ms.
type udpPeer struct {
	conn *net.UDPConn
	addr netip.AddrPort
}

func listenUDP(t *testing.T, n *network, name string) udpPeer {
	t.Helper()
	var c *net.UDPConn
	var ip netip.Addr
	open := func() {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			t.Fatal(err)
		}
	}
	if name == hostNode {
		ip = n.hostIP()
		open()
	} else {
		ip = n.nodes[name].ip
		inNamespace(t, n.nodes[name].ns, open)
	}
	t.Cleanup(func() { c.Close() })
	return udpPeer{conn: c, addr: c.LocalAddr().(*net.UDPAddr).AddrPort()}
}

// reaches reports whether a datagram from a arrives at b within 300 ms.
func reaches(t *testing.T, a, b udpPeer) bool {
	t.Helper()
	msg := fmt.Sprintf("probe %d", time.Now().UnixNano())
	if _, err := a.conn.WriteToUDPAddrPort([]byte(msg), b.addr); err != nil {
		return false // the sender's own tables refused it: not delivered either
	}
	buf := make([]byte, 64)
	deadline := time.Now().Add(300 * time.Millisecond)
	for {
		_ = b.conn.SetReadDeadline(deadline)
		n, _, err := b.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == msg {
			return true
		}
	}
}

// The nemesis's cuts, for real: two namespaces and the host on one bridge; a
// one-way cut stops one direction only, a partition both, the host can be cut off,
// a member's link taken down isolates it from everyone, every cut counts what it
// dropped, and closing removes every namespace.
func TestNetworkCutsIsolatesAndHeals(t *testing.T) {
	requireNetwork(t)
	prefix := fmt.Sprintf("sbt%d", os.Getpid()%100000)
	n, err := newNetwork(prefix, 250)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	for _, name := range []string{"a", "b"} {
		if _, err := n.add(name); err != nil {
			t.Fatal(err)
		}
	}
	a, b, host := listenUDP(t, n, "a"), listenUDP(t, n, "b"), listenUDP(t, n, hostNode)
	expect := func(what string, from, to udpPeer, want bool) {
		t.Helper()
		if got := reaches(t, from, to); got != want {
			t.Fatalf("%s: delivered %v, want %v", what, got, want)
		}
	}
	expect("a to b before any cut", a, b, true)
	expect("b to a before any cut", b, a, true)
	expect("host to a before any cut", host, a, true)

	if err := n.cut("b", "a"); err != nil {
		t.Fatal(err)
	}
	expect("a to b, b hearing nothing from a", a, b, false)
	expect("b to a, one way only", b, a, true)
	expect("host to b", host, b, true)
	dropped, err := n.uncut("b", "a")
	if err != nil || dropped < 1 {
		t.Fatalf("uncut: %d packets dropped, err %v; want at least the probe", dropped, err)
	}
	expect("a to b after the heal", a, b, true)

	if err := n.cut(hostNode, "a"); err != nil {
		t.Fatal(err)
	}
	expect("a to the host, the host hearing nothing from a", a, host, false)
	expect("host to a, one way only", host, a, true)
	if err := n.isolate("b"); err != nil {
		t.Fatal(err)
	}
	expect("host to b, isolated", host, b, false)
	expect("a to b, isolated", a, b, false)
	if err := n.healAll(); err != nil {
		t.Fatal(err)
	}
	expect("a to the host after healing", a, host, true)
	expect("a to b after healing", a, b, true)

	n.close()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), prefix+"-") {
		t.Fatalf("namespaces left after close:\n%s", out)
	}
}

// echoServer answers each line with itself, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends one line through addr and reads it back; the dial and the read
// have a deadline.
func roundTrip(addr string) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, fmt.Errorf("echo %q", line)
	}
	return time.Since(start), nil
}

// A poisoned proxy does what its toxic says, orders given as a child reads them:
// slow adds its latency each way (at least latency-jitter, so a lower bound, which
// load cannot break), lossy resets every connection, and a cure undoes either.
func TestProxiesPoisonAndCure(t *testing.T) {
	ps := newProxies()
	defer ps.close()
	addr, err := ps.add("echo", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(addr); err != nil {
		t.Fatalf("clean proxy: %v", err)
	}
	if err := ps.command("poison slow 300"); err != nil {
		t.Fatal(err)
	}
	if d, err := roundTrip(addr); err != nil || d < 400*time.Millisecond {
		t.Fatalf("slow proxy: round trip %s, err %v; want at least 2×(300-100) ms", d, err)
	}
	if err := ps.command("cure slow"); err != nil {
		t.Fatal(err)
	}
	if err := ps.command("poison lossy 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(addr); err == nil {
		t.Fatal("lossy proxy: the round trip succeeded")
	}
	if err := ps.command("cure lossy"); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(addr); err != nil {
		t.Fatalf("cured proxy: %v", err)
	}
	for _, bad := range []string{"poison", "poison slow x", "poison purple 1", "cure", "drop everything"} {
		if err := ps.command(bad); err == nil {
			t.Errorf("order %q accepted", bad)
		}
	}
}

// The network lane is drawn from the seed like the others, with targets that
// exist: two distinct nodes for a cut, a registrar and a side for a toxic link, a
// member for a backend fault. Without the nemesis there is no network lane and
// every backend fault hits the one member.
func TestPlanDrawsTheNetworkLane(t *testing.T) {
	sh := shape{replicas: 2, members: 3, nodes: 24, network: true}
	p := plan(42, 10*time.Minute, sh, 1)
	if !reflect.DeepEqual(p, plan(42, 10*time.Minute, sh, 1)) {
		t.Fatal("the same seed planned two schedules")
	}
	kinds := map[faultKind]int{}
	members := map[int]bool{}
	for _, lane := range p {
		for _, f := range lane {
			kinds[f.kind]++
			checkTargets(t, f, sh)
			if f.kind == killBackend {
				members[f.member] = true
			}
		}
	}
	for _, k := range networkLane().kinds {
		if kinds[k] == 0 {
			t.Errorf("ten minutes planned no %s", k)
		}
	}
	if len(members) < 2 {
		t.Errorf("kill-backend hit members %v, want several of 3", members)
	}
	for _, lane := range plan(42, 10*time.Minute, shape{replicas: 2, members: 1, nodes: 24}, 1) {
		for _, f := range lane {
			if f.lane == "network" || f.member != 0 {
				t.Fatalf("without the nemesis: %+v", f)
			}
		}
	}
}

func checkTargets(t *testing.T, f fault, sh shape) {
	t.Helper()
	nodes := sh.members + sh.replicas + 1
	switch f.kind {
	case partition, oneWayCut:
		if len(f.targets) != 2 || f.targets[0] == f.targets[1] || f.targets[0] >= nodes || f.targets[1] >= nodes {
			t.Fatalf("%s targets %v", f.kind, f.targets)
		}
		if host := nodes - 1; (f.targets[0] == host && f.targets[1] < sh.members) || (f.targets[1] == host && f.targets[0] < sh.members) {
			t.Fatalf("%s between the agents and a member, who never talk: %v", f.kind, f.targets)
		}
	case slowLink, lossyLink, narrowLink:
		if len(f.targets) != 2 || f.targets[0] >= sh.replicas || f.targets[1] > 1 || f.latency < 150 || f.latency >= 900 {
			t.Fatalf("%s targets %v latency %d", f.kind, f.targets, f.latency)
		}
	case registrarFromAgents, registrarFromBackend:
		if len(f.targets) != 1 || f.targets[0] >= sh.replicas {
			t.Fatalf("%s targets %v", f.kind, f.targets)
		}
	}
	if f.member < 0 || f.member >= sh.members {
		t.Fatalf("%s member %d", f.kind, f.member)
	}
}

// A run whose cuts dropped nothing is a setup error: only packets the cuts dropped
// count, not faults that were merely scheduled.
func TestCutPacketsCountsOnlyDrops(t *testing.T) {
	rs := []faultRecord{
		{fault: fault{kind: partition}},
		{fault: fault{kind: slowLink}, dropped: 99}, // not a cut
		{fault: fault{kind: oneWayCut}},
	}
	if n := cutPackets(rs); n != 0 {
		t.Fatalf("cutPackets = %d, want 0", n)
	}
	rs[2].dropped = 5
	if n := cutPackets(rs); n != 5 {
		t.Fatalf("cutPackets = %d, want 5", n)
	}
}
