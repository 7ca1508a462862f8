package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/dataplane/node/nodeconfig"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// The crash tests run the component that crashes as a process of its own — this test
// binary, re-executed in a child mode — and SIGKILL it.
const (
	envChild  = "SB_NODE_TEST_CHILD" // "node" or "controlplane"
	envConfig = "SB_NODE_TEST_CONFIG"
)

// runChild is the child process: a node or a control plane from a config file, until
// SIGTERM (or SIGKILL).
func runChild(mode, path string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	switch mode {
	case "node":
		err = runNodeChild(ctx, path, log)
	case "controlplane":
		err = runControlPlaneChild(ctx, path, log)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func runNodeChild(ctx context.Context, path string, log *slog.Logger) error {
	file, err := nodeconfig.Load(path)
	if err != nil {
		return err
	}
	cfg, res, err := file.Build(ctx, log)
	if err != nil {
		return err
	}
	defer func() { _ = res.Close() }()
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	return n.Run(ctx)
}

func runControlPlaneChild(ctx context.Context, path string, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, server.Options{Config: cfg, Logger: log, RequestTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// child is a component running as a process of its own.
type child struct {
	t      *testing.T
	name   string
	mode   string
	config string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan struct{}
}

// startChild writes config and starts the child; it is SIGKILLed at cleanup if still
// running.
func startChild(t *testing.T, name, mode, config string) *child {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, name: name, mode: mode, config: path}
	c.start()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", c.name, c.out.String())
		}
	})
	return c
}

func (c *child) start() {
	c.t.Helper()
	if c.out == nil {
		c.out = &syncbuf.Buffer{} // one buffer across restarts: the log of every life
	}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), envChild+"="+c.mode, envConfig+"="+c.config)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", c.name, err)
	}
	c.exited = make(chan struct{})
	cmd, exited := c.cmd, c.exited
	go func() { _ = cmd.Wait(); close(exited) }()
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill() {
	c.t.Helper()
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.t.Errorf("%s did not exit after SIGKILL", c.name)
	}
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered 200: %v", url, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitTCP waits until addr accepts connections.
func waitTCP(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never accepted a connection: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// series scrapes a node's /metrics and sums every series of metric whose labels
// contain all of match ("reason=\"unacked\"", ...), keyed by its label set.
func series(t *testing.T, addr, metric string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(metric):]
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue // another metric with this prefix
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[labels] += v
	}
	return out
}

// droppedAt sums the dropped-message counters of the nodes at addrs, and by label set.
func droppedAt(t *testing.T, addrs ...string) (total int, byLabels map[string]float64) {
	t.Helper()
	byLabels = map[string]float64{}
	for _, addr := range addrs {
		for labels, v := range series(t, addr, "switchboard_node_messages_dropped_total") {
			byLabels[labels] += v
			total += int(v)
		}
	}
	return total, byLabels
}

// steady publishes name at a steady pace from pub and records what it accepted and
// what sub received, until stop.
type steady struct {
	mu        sync.Mutex
	accepted  map[int]time.Time
	refused   int
	delivered map[int]time.Time
	dups      int
	stop      chan struct{} // stops the publisher
	quit      chan struct{} // stops the receiver
	published chan struct{} // closed when the publisher has stopped
	wg        sync.WaitGroup
}

func startSteady(ctx context.Context, pub *client, s *sub, name string, every time.Duration) *steady {
	st := &steady{accepted: map[int]time.Time{}, delivered: map[int]time.Time{}, stop: make(chan struct{}), quit: make(chan struct{}), published: make(chan struct{})}
	st.wg.Go(func() {
		defer close(st.published)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-st.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := pub.publish(pctx, name, fmt.Sprint("s", i), false)
			cancel()
			st.mu.Lock()
			if err == nil {
				st.accepted[i] = time.Now()
			} else {
				st.refused++
			}
			st.mu.Unlock()
		}
	})
	st.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-st.quit:
				return
			case m, ok := <-s.ch:
				if !ok {
					return
				}
				var i int
				if _, err := fmt.Sscanf(string(m.GetPayload()), "s%d", &i); err != nil {
					continue // a probe
				}
				st.mu.Lock()
				if _, dup := st.delivered[i]; dup {
					st.dups++
				}
				st.delivered[i] = time.Now()
				st.mu.Unlock()
			}
		}
	})
	return st
}

// deliveredAfter reports whether a message published after t has arrived.
func (st *steady) deliveredAfter(t time.Time) bool { return st.deliveredSince(t) > 0 }

// deliveredSince counts the messages published after t that have arrived.
func (st *steady) deliveredSince(t time.Time) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for i, at := range st.accepted {
		if at.After(t) {
			if _, ok := st.delivered[i]; ok {
				n++
			}
		}
	}
	return n
}

// waitDelivered waits until n messages published after since have arrived, or
// fails the test when ctx ends first. Counting messages rather than sleeping keeps
// a test's stream as long on a busy machine, where each publish takes longer, as
// on an idle one.
func (st *steady) waitDelivered(t *testing.T, ctx context.Context, since time.Time, n int, what string) {
	t.Helper()
	for st.deliveredSince(since) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d messages delivered when the test's time ran out", what, st.deliveredSince(since), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finish stops publishing and waits (up to ctx) until every accepted message arrived
// or none arrived for settle; then it stops receiving.
func (st *steady) finish(ctx context.Context, settle time.Duration) {
	close(st.stop)
	<-st.published // its last publish may still be out
	defer func() {
		close(st.quit)
		st.wg.Wait()
	}()
	last, lastN := time.Now(), -1
	for ctx.Err() == nil {
		st.mu.Lock()
		n, missing := len(st.delivered), 0
		for i := range st.accepted {
			if _, ok := st.delivered[i]; !ok {
				missing++
			}
		}
		st.mu.Unlock()
		if missing == 0 || (n == lastN && time.Since(last) > settle) {
			break
		}
		if n != lastN {
			last, lastN = time.Now(), n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gap is the longest silence between two deliveries around t, and the accepted
// messages that never arrived.
func (st *steady) report(around time.Time) (gap time.Duration, accepted, delivered, lost int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var before, after time.Time
	for _, at := range st.delivered {
		if !at.After(around) && at.After(before) {
			before = at
		}
		if at.After(around) && (after.IsZero() || at.Before(after)) {
			after = at
		}
	}
	if !before.IsZero() && !after.IsZero() {
		gap = after.Sub(before)
	}
	for i := range st.accepted {
		if _, ok := st.delivered[i]; ok {
			delivered++
		} else {
			lost++
		}
	}
	return gap, len(st.accepted), delivered, lost
}
