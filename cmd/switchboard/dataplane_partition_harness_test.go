package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// The data-plane partition tests run a control plane and reference nodes as
// `switchboard controlplane` / `switchboard node` processes and put a pathProxy on the
// paths they partition.

// pathProxy forwards TCP connections to target until the test partitions the path:
//
//   - BlackHole: bytes in either direction are held, connections stay open and new
//     ones are accepted and held too (a network that silently stops delivering);
//   - Cut: every connection is closed and new ones are closed as soon as accepted;
//   - Heal: held bytes are delivered, late and in order, and forwarding resumes.
//
// Unlike partitionProxy (the control plane's path to etcd), a cut path heals.
type pathProxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	mode  proxyMode
	pipes []*pathPipe
	conns []net.Conn
	wg    sync.WaitGroup
}

type proxyMode int

const (
	proxyForward proxyMode = iota
	proxyHole
	proxyCut
)

func startPathProxy(t *testing.T, target string) *pathProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pathProxy{lis: lis, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *pathProxy) Addr() string { return p.lis.Addr().String() }

func (p *pathProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == proxyCut {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.mode == proxyCut {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		toTarget := &pathPipe{dst: up, hold: p.mode == proxyHole}
		toClient := &pathPipe{dst: c, hold: p.mode == proxyHole}
		p.pipes = append(p.pipes, toTarget, toClient)
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { toTarget.copyFrom(c) })
		p.wg.Go(func() { toClient.copyFrom(up) })
	}
}

// BlackHole stops delivering bytes without closing anything.
func (p *pathProxy) BlackHole() { p.set(proxyHole) }

// Cut closes every connection and refuses new ones until Heal.
func (p *pathProxy) Cut() { p.set(proxyCut) }

// Heal delivers what was held and forwards again.
func (p *pathProxy) Heal() { p.set(proxyForward) }

func (p *pathProxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	if m == proxyCut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns, p.pipes = nil, nil
		return
	}
	for _, h := range p.pipes {
		h.setHold(m == proxyHole)
	}
}

func (p *pathProxy) close() {
	p.mu.Lock()
	_ = p.lis.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// pathPipe is one direction of a proxied connection.
type pathPipe struct {
	mu        sync.Mutex
	dst       net.Conn
	hold      bool
	held      []byte
	srcClosed bool
}

func (h *pathPipe) copyFrom(src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			h.mu.Lock()
			if h.hold {
				h.held = append(h.held, buf[:n]...)
			} else {
				_, _ = h.dst.Write(buf[:n])
			}
			h.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold {
		h.srcClosed = true // a black hole delivers no FIN either
		return
	}
	_ = h.dst.Close()
	_ = src.Close()
}

func (h *pathPipe) setHold(hold bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = hold
	if hold {
		return
	}
	if len(h.held) > 0 {
		_, _ = h.dst.Write(h.held)
		h.held = nil
	}
	if h.srcClosed {
		_ = h.dst.Close()
	}
}

// freeLoopback returns a loopback address nobody listens on right now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// dpControlPlane is a `switchboard controlplane` process in config mode, in memory.
type dpControlPlane struct {
	p            *childProc
	north, south string
}

func startDPControlPlane(t *testing.T, topology string) *dpControlPlane {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "controlplane.yaml")
	body := fmt.Sprintf(`northbound: {endpoint: "127.0.0.1:0"}
southbound: {endpoint: "127.0.0.1:0"}
database: {type: in_memory}
topology:
%s
reconciler: {base_retry_delay: 20ms, reconcile_period: 1s, max_requeues: 15, workers: 4}
`, topology)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "controlplane", nil, "controlplane", "--config", cfg, "--metrics-listen", "", "--log-level", "info")
	north := p.waitOut(regexp.MustCompile(`(?m)^\s*northbound\s+(\S+)$`))[1]
	south := p.waitOut(regexp.MustCompile(`(?m)^\s*southbound\s+(\S+)$`))[1]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controlplane output:\n%s\n%s", p.out, p.err)
		}
	})
	return &dpControlPlane{p: p, north: north, south: south}
}

// dpNode is a `switchboard node` process.
type dpNode struct {
	id, listen, health string
	p                  *childProc
}

// startDPNode runs node id of group with its control plane at cp; external is its
// external endpoint ("" : it only dials); extra is appended to the file.
func startDPNode(t *testing.T, group, id, listen, external, cp, extra string) *dpNode {
	t.Helper()
	health := freeLoopback(t)
	cfg := filepath.Join(t.TempDir(), group+"-"+id+".yaml")
	body := fmt.Sprintf("node_id: %s\ngroup: %s\nlisten: %s\nhealth_listen: %s\ncontrol_plane: [%s]\nlink_grace: 3s\n",
		id, group, listen, health, cp)
	if external != "" {
		body += "external_endpoint: " + external + "\n"
	}
	body += extra
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &dpNode{id: group + "/" + id, listen: listen, health: health}
	n.p = startProc(t, n.id, nil, "node", "--config", cfg, "--log-level", "debug")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output:\n%s\n%s", n.id, n.p.out, n.p.err)
		}
	})
	n.p.waitReady(health)
	return n
}

// ready reports whether the node answers /readyz with 200 (registered with the
// control plane).
func (n *dpNode) ready() bool {
	resp, err := http.Get("http://" + n.health + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metric sums the node's series of metric whose label set contains every of match.
func (n *dpNode) metric(t *testing.T, metric string, match ...string) (float64, int) {
	t.Helper()
	resp, err := http.Get("http://" + n.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum, count := 0.0, 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(labels, m) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
		count++
	}
	return sum, count
}

// nodeClient is a local client of a node (the client API of dataplane/node/client.go).
type nodeClient struct {
	nodev1.NodeServiceClient
}

func dialNode(t *testing.T, addr string) *nodeClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(node.ClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &nodeClient{NodeServiceClient: nodev1.NewNodeServiceClient(cc)}
}

func (c *nodeClient) publish(ctx context.Context, name, payload string) error {
	n, err := node.ParseName(name)
	if err != nil {
		return err
	}
	_, err = c.Publish(ctx, &nodev1.PublishRequest{Name: node.NameProto(n), Payload: []byte(payload)})
	return err
}

// subscribe opens a subscription; its payloads arrive on the returned channel.
func (c *nodeClient) subscribe(t *testing.T, name string) <-chan string {
	t.Helper()
	n, err := node.ParseName(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: node.NameProto(n)})
	if err == nil {
		_, err = st.Recv() // the subscription id: subscribed
	}
	if err != nil {
		cancel()
		t.Fatalf("subscribe %s: %v", name, err)
	}
	ch := make(chan string, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			for _, m := range r.GetMessages() {
				ch <- string(m.GetPayload())
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		for range ch {
		}
		<-done
	})
	return ch
}

// stream publishes name at a steady pace and records what the node accepted and what
// the subscriber got, keyed by sequence number.
type stream struct {
	mu        sync.Mutex
	accepted  map[int]time.Time
	refused   int
	refusedAt []time.Time
	delivered map[int]time.Time
	dups      int
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startStream(ctx context.Context, pub *nodeClient, sub <-chan string, name string, every time.Duration) *stream {
	s := &stream{accepted: map[int]time.Time{}, delivered: map[int]time.Time{}, stop: make(chan struct{})}
	s.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := pub.publish(pctx, name, fmt.Sprint("s", i))
			cancel()
			s.mu.Lock()
			if err == nil {
				s.accepted[i] = time.Now()
			} else {
				s.refused++
				s.refusedAt = append(s.refusedAt, time.Now())
			}
			s.mu.Unlock()
		}
	})
	go func() {
		for m := range sub {
			var i int
			if _, err := fmt.Sscanf(m, "s%d", &i); err != nil {
				continue // a probe
			}
			s.mu.Lock()
			if _, dup := s.delivered[i]; dup {
				s.dups++
			}
			s.delivered[i] = time.Now()
			s.mu.Unlock()
		}
	}()
	return s
}

// deliveredSince counts the messages accepted after t that arrived.
func (s *stream) deliveredSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, at := range s.accepted {
		if _, ok := s.delivered[i]; ok && at.After(t) {
			n++
		}
	}
	return n
}

// refusedIn counts the publishes refused in [from, to).
func (s *stream) refusedIn(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.refusedAt {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// waitDelivered waits until n messages accepted after since arrived.
func (s *stream) waitDelivered(t *testing.T, ctx context.Context, since time.Time, n int, what string) {
	t.Helper()
	for s.deliveredSince(since) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d messages delivered when the test's time ran out", what, s.deliveredSince(since), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finish stops publishing and waits until every accepted message arrived or none
// arrived for settle.
func (s *stream) finish(ctx context.Context, settle time.Duration) {
	close(s.stop)
	s.wg.Wait()
	last, lastN := time.Now(), -1
	for ctx.Err() == nil {
		s.mu.Lock()
		n, missing := len(s.delivered), 0
		for i := range s.accepted {
			if _, ok := s.delivered[i]; !ok {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 || (n == lastN && time.Since(last) > settle) {
			return
		}
		if n != lastN {
			last, lastN = time.Now(), n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// report counts the accepted messages (those accepted in [from, to) when to is not
// zero) that arrived and that did not, and the longest silence between deliveries
// after from.
func (s *stream) report(from, to time.Time) (accepted, delivered, lost int, gap time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, at := range s.accepted {
		if at.Before(from) || (!to.IsZero() && !at.Before(to)) {
			continue
		}
		accepted++
		if _, ok := s.delivered[i]; ok {
			delivered++
		} else {
			lost++
		}
	}
	var times []time.Time
	for _, at := range s.delivered {
		if at.After(from) {
			times = append(times, at)
		}
	}
	sortTimes(times)
	prev := from
	for _, at := range times {
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return accepted, delivered, lost, gap
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// waitReaching publishes probes on name until sub gets one.
func waitReaching(t *testing.T, ctx context.Context, pub *nodeClient, sub <-chan string, name string) {
	t.Helper()
	for {
		_ = pub.publish(ctx, name, "probe")
		select {
		case <-sub:
			return
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("%s never reached its subscriber", name)
		}
	}
}

// ctlJSON runs `switchboard ctl ARGS -o json` against the northbound API at north and
// decodes its output into m.
func ctlJSON(t *testing.T, north string, m proto.Message, args ...string) error {
	t.Helper()
	r := runBinary(t, "", nil, append([]string{"ctl", "--server", north, "-o", "json"}, args...)...)
	if r.code != 0 {
		return fmt.Errorf("ctl %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return protojson.Unmarshal([]byte(r.stdout), m)
}

// dpLinks lists every link the control plane has (deleted ones too).
func dpLinks(t *testing.T, north string) ([]*controlplanev1.Link, error) {
	t.Helper()
	var resp controlplanev1.ListLinksResponse
	err := ctlJSON(t, north, &resp, "link", "list", "--all")
	return resp.GetLinks(), err
}

// dpRoutes lists every route the control plane has (deleted ones too).
func dpRoutes(t *testing.T, north string) ([]*controlplanev1.Route, error) {
	t.Helper()
	var resp controlplanev1.ListRoutesResponse
	err := ctlJSON(t, north, &resp, "route", "list", "--all")
	return resp.GetRoutes(), err
}

// dpNodes lists the nodes the control plane knows.
func dpNodes(t *testing.T, north string) ([]*controlplanev1.Node, error) {
	t.Helper()
	var resp controlplanev1.ListNodesResponse
	err := ctlJSON(t, north, &resp, "node", "list")
	return resp.GetNodes(), err
}

// dpWait polls check every 100 ms until it returns nil, failing the test with its
// last error after d.
func dpWait(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
