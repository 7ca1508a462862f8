package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 15 * time.Second // generous bound for anything a test waits on

func ep(service, addr string, port int, ttl time.Duration) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1, TTL: endpoint.TTL(ttl)}
}

func mentry(e endpoint.Endpoint, checks ...check.Spec) manifest.Entry {
	for i := range checks {
		checks[i] = checks[i].WithDefaults()
	}
	return manifest.Entry{Endpoint: e, Checks: checks}
}

func manifestOf(entries ...manifest.Entry) *manifest.Manifest {
	return &manifest.Manifest{Entries: entries}
}

// recorder is a Publisher in front of a real registry that records every batch and
// can be made to fail, like a backend that went away.
type recorder struct {
	r    registry.Registry
	mu   sync.Mutex
	ops  []registry.Op
	dead atomic.Bool // writes fail and reach nothing: the process is gone
	fail atomic.Int32
	lose atomic.Int32 // writes land but their reply is lost: the caller sees an error
}

var errUnreachable = errors.New("registry unreachable")

func (p *recorder) Apply(ctx context.Context, ops []registry.Op) error {
	if p.dead.Load() {
		return errUnreachable
	}
	if p.fail.Load() > 0 {
		p.fail.Add(-1)
		return errUnreachable
	}
	p.mu.Lock()
	p.ops = append(p.ops, ops...)
	p.mu.Unlock()
	var err error
	if p.r != nil {
		err = p.r.Apply(ctx, ops)
	}
	if err == nil && p.lose.Load() > 0 {
		p.lose.Add(-1)
		return errUnreachable
	}
	return err
}

// drained reports whether k was written as Draining and, after that, removed.
func (p *recorder) drained(k endpoint.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := false
	for _, op := range p.ops {
		switch {
		case op.Endpoint.Key() != k:
		case op.Kind == registry.OpRegister && op.Endpoint.Health == endpoint.Draining:
			seen = true
		case op.Kind == registry.OpUnregister && seen:
			return true
		}
	}
	return false
}

// count returns how many ops of kind were written for key.
func (p *recorder) count(kind registry.OpKind, k endpoint.Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, op := range p.ops {
		if op.Kind == kind && op.Endpoint.Key() == k {
			n++
		}
	}
	return n
}

func (p *recorder) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ops)
}

// running is an Agent started in the background.
type running struct {
	a      *Agent
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, m *manifest.Manifest, o Options) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := New(m, o)
	r := &running{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the agent (the SIGTERM path) and returns Run's result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // later calls see the same result
		return err
	case <-time.After(wait):
		t.Fatal("agent did not stop")
		return nil
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listed(t *testing.T, r registry.Registry, k endpoint.Key) bool {
	t.Helper()
	eps, err := r.List(context.Background(), endpoint.Filter{Cluster: k.Cluster, Service: k.Service, Protocol: k.Protocol, Address: k.Address})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.Key() == k {
			return true
		}
	}
	return false
}

func status(a *Agent, k endpoint.Key) (EntryStatus, bool) {
	for _, s := range a.Status() {
		if s.Key == k {
			return s, true
		}
	}
	return EntryStatus{}, false
}

// switchable is a real HTTP health endpoint whose answer the test flips, counting the
// probes it answered each way.
type switchable struct {
	srv        *httptest.Server
	ok         atomic.Bool
	pass, fail atomic.Int64
}

func newSwitchable(t *testing.T, ok bool) *switchable {
	s := &switchable{}
	s.ok.Store(ok)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.ok.Load() {
			s.pass.Add(1)
			return
		}
		s.fail.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *switchable) spec(interval time.Duration, rise, fall int) check.Spec {
	return check.Spec{Kind: check.HTTP, Target: s.srv.URL, Interval: interval, Timeout: interval, Rise: rise, Fall: fall}
}

// logBuffer captures a logger's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) count(s string) int { return strings.Count(b.String(), s) }

func newLogger(b *logBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func newMemory(t *testing.T) *registry.Front {
	r := memory.New()
	t.Cleanup(func() { r.Close() })
	return r
}
