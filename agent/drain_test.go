package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
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
func runWithHTTP(t *testing.T, cfg Config) (base string, stop context.CancelFunc, waitRun func() error) {
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
	// Each wait is bounded: a Run that never returns fails the test rather than
	// hanging it until go test's own timeout.
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of the cleanup's cancel", wait)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String(), cancel, func() error {
		t.Helper()
		select {
		case <-done:
			return runErr
		case <-time.After(wait):
			t.Fatalf("Run did not return within %s", wait)
			return nil
		}
	}
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
// entry's own win, an entry in another region takes no zone from the node, and
// one that names a zone takes no region from it.
func TestLocalize(t *testing.T) {
	r := newMemory(t)
	plain := ep("plain", "10.0.0.1", 80, 0)
	ownZone := ep("ownzone", "10.0.0.2", 80, 0)
	ownZone.Zone = "eu-west-1b"
	away := ep("away", "10.0.0.3", 80, 0)
	away.Region = "us-east"
	sameRegion := ep("same", "10.0.0.4", 80, 0)
	sameRegion.Region = "eu-west"
	foreignZone := ep("foreignzone", "10.0.0.5", 80, 0)
	foreignZone.Zone = "us-east-1a"
	both := ep("both", "10.0.0.6", 80, 0)
	both.Region, both.Zone = "us-east", "us-east-1b"
	start(t, manifestOf(mentry(plain), mentry(ownZone), mentry(away), mentry(sameRegion), mentry(foreignZone), mentry(both)),
		Options{Publisher: r, Region: "eu-west", Zone: "eu-west-1a"})
	// An entry that names only a zone keeps no region: the node's need not be the
	// zone's (us-east-1a is not in eu-west).
	want := map[string][2]string{
		"plain": {"eu-west", "eu-west-1a"}, "ownzone": {"", "eu-west-1b"},
		"away": {"us-east", ""}, "same": {"eu-west", "eu-west-1a"},
		"foreignzone": {"", "us-east-1a"}, "both": {"us-east", "us-east-1b"},
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

// TestDrainOrphans: an entry that left the manifest and whose removal is still
// being retried when the agent stops may still be in the registry: it is drained
// with the others, then removed.
func TestDrainOrphans(t *testing.T) {
	p := &recorder{r: newMemory(t)}
	var logs logBuffer
	web, api := ep("web", "10.0.0.1", 80, 0), ep("api", "10.0.0.2", 80, 0)
	const grace = 200 * time.Millisecond
	a := start(t, manifestOf(mentry(web), mentry(api)), Options{Publisher: p, DrainGrace: grace,
		RetryMin: time.Hour, RetryMax: time.Hour, Logger: newLogger(&logs)})
	eventually(t, "registered", func() bool { return listed(t, p.r, web.Key()) && listed(t, p.r, api.Key()) })
	p.fail.Store(1) // web's removal fails, and is retried only in an hour
	a.a.Reload(manifestOf(mentry(api)))
	eventually(t, "web's removal failed", func() bool { return strings.Contains(logs.String(), "registry write failed") })
	stopped := time.Now()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if took := time.Since(stopped); took < grace {
		t.Errorf("stopped %v after the signal, before the %v grace period ran out", took, grace)
	}
	for _, e := range []endpoint.Endpoint{web, api} {
		if !p.drained(e.Key()) {
			t.Errorf("%s was not published as draining before its removal", e.Key())
		}
		if listed(t, p.r, e.Key()) {
			t.Errorf("%s still registered after shutdown", e.Key())
		}
	}
}

// TestDrainLostReply: an entry whose register landed but whose reply was lost is
// not known to be registered, yet clients may route to it: it is drained too.
func TestDrainLostReply(t *testing.T) {
	p := &recorder{r: newMemory(t)}
	p.lose.Store(1)
	web := ep("web", "10.0.0.1", 80, 0)
	a := start(t, manifestOf(mentry(web)), Options{Publisher: p, DrainGrace: 200 * time.Millisecond,
		RetryMin: time.Hour, RetryMax: time.Hour})
	eventually(t, "register failed", func() bool { s, ok := status(a.a, web.Key()); return ok && s.WriteError != "" })
	if !listed(t, p.r, web.Key()) {
		t.Fatal("the register whose reply was lost did not land")
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !p.drained(web.Key()) {
		t.Error("the entry whose reply was lost was not published as draining before its removal")
	}
	if listed(t, p.r, web.Key()) {
		t.Error("entry still registered after shutdown")
	}
}

// refusing is a publisher that refuses every batch that registers key, as a
// registry refuses an entry it will never take: nothing of the batch is written.
type refusing struct {
	*recorder
	key endpoint.Key
}

func (p refusing) Apply(ctx context.Context, ops []registry.Op) error {
	for _, op := range ops {
		if op.Kind == registry.OpRegister && op.Endpoint.Key() == p.key {
			return errUnreachable
		}
	}
	return p.recorder.Apply(ctx, ops)
}

// TestDrainRefusedEntry: an entry the registry refuses, never registered, does not
// keep the registered ones from draining: the draining write is made again without
// the entries that may not be in the registry.
func TestDrainRefusedEntry(t *testing.T) {
	rec := &recorder{r: newMemory(t)}
	var logs logBuffer
	web, bad := ep("web", "10.0.0.1", 80, 0), ep("bad", "10.0.0.2", 80, 0)
	const grace = 200 * time.Millisecond
	a := start(t, manifestOf(mentry(web)), Options{Publisher: refusing{rec, bad.Key()}, DrainGrace: grace,
		RetryMin: time.Hour, RetryMax: time.Hour, Logger: newLogger(&logs)})
	eventually(t, "registered", func() bool { return listed(t, rec.r, web.Key()) })
	a.a.Reload(manifestOf(mentry(web), mentry(bad)))
	eventually(t, "bad refused", func() bool { s, ok := status(a.a, bad.Key()); return ok && s.WriteError != "" })
	stopped := time.Now()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if took := time.Since(stopped); took < grace {
		t.Errorf("stopped %v after the signal, before the %v grace period ran out", took, grace)
	}
	if !rec.drained(web.Key()) {
		t.Errorf("web was not published as draining before its removal:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "draining failed") ||
		!strings.Contains(logs.String(), "trying again with the registered entries only") {
		t.Errorf("log lacks the second draining write, or reports a failed drain:\n%s", logs.String())
	}
}

// TestNotReadyAsChecksStop: /readyz answers 503 as soon as the agent is told to
// stop, not once a check's probe under way has finished.
func TestNotReadyAsChecksStop(t *testing.T) {
	dir := t.TempDir()
	flag, hanging := filepath.Join(dir, "flag"), filepath.Join(dir, "hanging")
	// Once flag exists each probe hangs, and its children keep its output open after
	// it is killed: a probe ends only a WaitDelay (1s) after its timeout or the stop.
	script := fmt.Sprintf(`if [ -e %s ]; then touch %s; sleep 3 & sleep 3; fi`, flag, hanging)
	spec := check.Spec{Kind: check.Exec, Argv: []string{"sh", "-c", script}, Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}
	web := ep("web", "10.0.0.1", 80, 0)
	base, stop, waitRun := runWithHTTP(t, Config{Manifest: manifestOf(mentry(web, spec)), Registry: newMemory(t)})
	eventually(t, "ready", func() bool { code, _ := readyz(t, base); return code == http.StatusOK })
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a probe hangs", func() bool { _, err := os.Stat(hanging); return err == nil })
	stop()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		code, body := readyz(t, base)
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "shutting down") {
				t.Errorf("/readyz after the signal = %d %q, want it to say the agent shuts down", code, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q 500ms after the signal, while a probe was under way", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := waitRun(); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestRunStoppedBeforeStart: Run whose context is done before its first pass
// writes nothing and does not wait for a grace period, even through a publisher
// that ignores the context.
func TestRunStoppedBeforeStart(t *testing.T) {
	p := &recorder{} // writes nowhere, whatever ctx says
	skip := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := New(manifestOf(mentry(ep("web", "10.0.0.1", 80, 0))), Options{Publisher: p, DrainGrace: time.Hour, SkipDrain: skip})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(2 * time.Second):
		close(skip)
		select {
		case <-done:
		case <-time.After(wait):
		}
		t.Fatal("Run, stopped before it started, waited for the drain's grace period")
	}
	if n := p.total(); n != 0 {
		t.Errorf("Run, stopped before it started, wrote %d ops", n)
	}
}
