package agent

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// health returns k's health in r, and whether r holds k.
func health(t *testing.T, r registry.Registry, k endpoint.Key) (endpoint.Health, bool) {
	t.Helper()
	eps, err := r.List(context.Background(), endpoint.Filter{Cluster: k.Cluster, Service: k.Service})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.Key() == k {
			return e.Health, true
		}
	}
	return 0, false
}

// runWithHTTP runs Run with /readyz and /metrics on a listener of its own and
// returns their base URL, a stop that cancels ctx (SIGTERM), and a wait for Run's
// result.
func runWithHTTP(t *testing.T, cfg Config) (base string, stop context.CancelFunc, wait func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP = ln
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = Run(ctx, cfg); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String(), cancel, func() error { <-done; return runErr }
}

// TestDrainOnShutdown: on SIGTERM the entry is published again as draining, /readyz
// says so, and it is removed once the grace period has run out, not before.
func TestDrainOnShutdown(t *testing.T) {
	r := newMemory(t)
	var logs logBuffer
	web := ep("web", "10.0.0.1", 80, 0)
	const grace = 700 * time.Millisecond
	base, stop, waitRun := runWithHTTP(t, Config{Manifest: manifestOf(mentry(web)), Registry: r, Logger: newLogger(&logs),
		Agent: Options{DrainGrace: grace}})
	eventually(t, "registered healthy", func() bool { h, ok := health(t, r, web.Key()); return ok && h == endpoint.Healthy })
	eventually(t, "ready", func() bool { code, _ := readyz(t, base); return code == http.StatusOK })

	stopped := time.Now()
	stop()
	eventually(t, "draining in the registry", func() bool { h, ok := health(t, r, web.Key()); return ok && h == endpoint.Draining })
	if code, body := readyz(t, base); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining = %d %q, want 503 naming draining", code, body)
	}
	if m := get(t, base+"/metrics"); !strings.Contains(m, "switchboard_agent_draining 1") ||
		!strings.Contains(m, `switchboard_agent_registry_writes_total{op="drain",result="ok"} 1`) {
		t.Errorf("/metrics while draining lacks the draining gauge or the drain write:\n%s", m)
	}
	if err := waitRun(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if took := time.Since(stopped); took < grace {
		t.Errorf("stopped %v after the signal, before the %v grace period ran out", took, grace)
	}
	if _, ok := health(t, r, web.Key()); ok {
		t.Error("entry still registered after the grace period")
	}
	for _, s := range []string{"draining: entries published as draining", "unregistered on shutdown"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, logs.String())
		}
	}
}

// TestDrainSkipped: SkipDrain (a second SIGTERM) ends a long grace period at once.
func TestDrainSkipped(t *testing.T) {
	r := newMemory(t)
	web := ep("web", "10.0.0.1", 80, 0)
	skip := make(chan struct{})
	a := start(t, manifestOf(mentry(web)), Options{Publisher: r, DrainGrace: time.Hour, SkipDrain: skip})
	eventually(t, "registered", func() bool { return listed(t, r, web.Key()) })
	a.cancel()
	eventually(t, "draining", func() bool { h, ok := health(t, r, web.Key()); return ok && h == endpoint.Draining })
	close(skip)
	if err := a.stop(t); err != nil { // stop fails the test if Run takes more than `wait`
		t.Fatalf("Run = %v", err)
	}
	if listed(t, r, web.Key()) {
		t.Error("entry still registered after the skipped drain")
	}
}

// TestDrainOnlyWhatClientsRouteTo: an entry kept on shutdown (a pod) is neither
// drained nor removed, and one already draining or unhealthy by hand is not written
// again; with nothing to drain there is no grace period to wait.
func TestDrainOnlyWhatClientsRouteTo(t *testing.T) {
	p := &recorder{r: newMemory(t)}
	pod := ep("pod", "10.0.0.2", 80, time.Minute)
	handDrained := ep("old", "10.0.0.3", 80, 0)
	handDrained.Health = endpoint.Draining
	sick := ep("sick", "10.0.0.4", 80, 0)
	sick.Health = endpoint.Unhealthy
	a := start(t, manifestOf(mentry(handDrained), mentry(sick)), Options{Publisher: p, DrainGrace: time.Hour})
	a.a.SetSource("pods", []manifest.Entry{{Endpoint: pod, KeepOnShutdown: true}})
	eventually(t, "registered", func() bool {
		return listed(t, p.r, pod.Key()) && listed(t, p.r, handDrained.Key()) && listed(t, p.r, sick.Key())
	})
	if err := a.stop(t); err != nil { // an hour's grace would fail it
		t.Fatalf("Run = %v", err)
	}
	if !listed(t, p.r, pod.Key()) {
		t.Error("the pod's entry (KeepOnShutdown) was removed")
	}
	if n := p.count(registry.OpRegister, pod.Key()); n != 1 {
		t.Errorf("the pod's entry was written %d times, want once (not drained)", n)
	}
	for _, e := range []endpoint.Endpoint{handDrained, sick} {
		if h, ok := health(t, p.r, e.Key()); ok {
			t.Errorf("%s still registered (%v) after shutdown", e.Key(), h)
		}
		if n := p.count(registry.OpRegister, e.Key()); n != 1 {
			t.Errorf("%s written %d times, want once", e.Key(), n)
		}
	}
}

// TestDrainWriteFails: when the draining write fails, clients were not told, so
// the entry is removed at once rather than after the grace period.
func TestDrainWriteFails(t *testing.T) {
	p := &recorder{r: newMemory(t)}
	var logs logBuffer
	web := ep("web", "10.0.0.1", 80, 0)
	a := start(t, manifestOf(mentry(web)), Options{Publisher: p, DrainGrace: time.Hour, Logger: newLogger(&logs)})
	eventually(t, "registered", func() bool { return listed(t, p.r, web.Key()) })
	p.fail.Store(1)
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if listed(t, p.r, web.Key()) {
		t.Error("entry still registered")
	}
	if !strings.Contains(logs.String(), "draining failed") {
		t.Errorf("log lacks the failed drain:\n%s", logs.String())
	}
}

// TestLocalize: the agent's region and zone fill in what an entry leaves out; an
// entry's own win, and an entry in another region takes no zone from the node.
func TestLocalize(t *testing.T) {
	r := newMemory(t)
	plain := ep("plain", "10.0.0.1", 80, 0)
	ownZone := ep("ownzone", "10.0.0.2", 80, 0)
	ownZone.Zone = "eu-west-1b"
	away := ep("away", "10.0.0.3", 80, 0)
	away.Region = "us-east"
	sameRegion := ep("same", "10.0.0.4", 80, 0)
	sameRegion.Region = "eu-west"
	start(t, manifestOf(mentry(plain), mentry(ownZone), mentry(away), mentry(sameRegion)),
		Options{Publisher: r, Region: "eu-west", Zone: "eu-west-1a"})
	want := map[string][2]string{
		"plain": {"eu-west", "eu-west-1a"}, "ownzone": {"eu-west", "eu-west-1b"},
		"away": {"us-east", ""}, "same": {"eu-west", "eu-west-1a"},
	}
	eventually(t, "all registered", func() bool {
		eps, _ := r.List(context.Background(), endpoint.Filter{})
		return len(eps) == len(want)
	})
	eps, err := r.List(context.Background(), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if got := [2]string{e.Region, e.Zone}; got != want[e.Service] {
			t.Errorf("%s: region, zone = %q, want %q", e.Service, got, want[e.Service])
		}
	}
}
