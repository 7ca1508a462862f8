package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestRiseAndFall(t *testing.T) {
	const rise, fall = 3, 2
	r := newMemory(t)
	hc := newSwitchable(t, false)
	e := ep("web", "10.0.0.1", 80, 0)
	a := start(t, manifestOf(mentry(e, hc.spec(20*time.Millisecond, rise, fall))), Options{Publisher: r})

	eventually(t, "failing probes", func() bool { return hc.fail.Load() >= 3 })
	if listed(t, r, e.Key()) {
		t.Fatal("registered while the check fails")
	}

	hc.ok.Store(true)
	eventually(t, "registered after rise", func() bool { return listed(t, r, e.Key()) })
	if n := hc.pass.Load(); n < rise {
		t.Fatalf("registered after %d passing probes, want at least rise=%d", n, rise)
	}

	failBefore := hc.fail.Load()
	hc.ok.Store(false)
	eventually(t, "removed after fall", func() bool { return !listed(t, r, e.Key()) })
	if n := hc.fail.Load() - failBefore; n < fall {
		t.Fatalf("removed after %d failing probes, want at least fall=%d", n, fall)
	}
	if s, _ := status(a.a, e.Key()); s.Registered || s.Reason != ReasonUnhealthy {
		t.Errorf("status = %+v", s)
	}

	hc.ok.Store(true)
	eventually(t, "registered again", func() bool { return listed(t, r, e.Key()) })
}

func TestRemoveOnUnhealthy(t *testing.T) {
	// No TTL: the entry would never expire, so only an active removal takes it away.
	r := newMemory(t)
	p := &recorder{r: r}
	hc := newSwitchable(t, true)
	e := ep("web", "10.0.0.1", 80, 0)
	start(t, manifestOf(mentry(e, hc.spec(20*time.Millisecond, 1, 1))), Options{Publisher: p})
	eventually(t, "registered", func() bool { return listed(t, r, e.Key()) })
	hc.ok.Store(false)
	eventually(t, "removed at once", func() bool { return !listed(t, r, e.Key()) })
	if p.count(registry.OpUnregister, e.Key()) != 1 {
		t.Errorf("unregisters = %d, want 1", p.count(registry.OpUnregister, e.Key()))
	}
}

func TestKeepWhenUnhealthy(t *testing.T) {
	r := newMemory(t)
	p := &recorder{r: r}
	hc := newSwitchable(t, true)
	forever := ep("forever", "10.0.0.1", 80, 0)
	ttl := ep("ttl", "10.0.0.2", 80, time.Second)
	spec := hc.spec(20*time.Millisecond, 1, 1)
	a := start(t, manifestOf(mentry(forever, spec), mentry(ttl, spec)), Options{Publisher: p, KeepWhenUnhealthy: true})
	eventually(t, "registered", func() bool { return listed(t, r, forever.Key()) && listed(t, r, ttl.Key()) })
	hc.ok.Store(false)
	eventually(t, "unhealthy", func() bool { s, _ := status(a.a, ttl.Key()); return !s.Healthy })
	// The TTL entry is no longer refreshed and expires...
	eventually(t, "ttl entry expired", func() bool { return !listed(t, r, ttl.Key()) })
	// ...while nothing removed the other.
	if !listed(t, r, forever.Key()) || p.count(registry.OpUnregister, forever.Key()) != 0 {
		t.Fatal("KeepWhenUnhealthy removed an unhealthy entry")
	}
	// Shutdown still removes what the agent registered.
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if listed(t, r, forever.Key()) {
		t.Fatal("shutdown left the unhealthy entry registered")
	}
}

func TestTTLRefreshAndExpiryWhenKilled(t *testing.T) {
	const ttl = 2 * time.Second
	r := newMemory(t)
	p := &recorder{r: r}
	e := ep("web", "10.0.0.1", 80, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), wait+4*ttl)
	defer cancel()
	events, err := r.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	a := start(t, manifestOf(mentry(e)), Options{Publisher: p})

	// Alive for well past one TTL: refreshed, never removed.
	observeUntil := time.Now().Add(5 * ttl / 2)
	added := false
	for time.Now().Before(observeUntil) {
		select {
		case ev := <-events:
			switch ev.Type {
			case registry.Added:
				added = true
			case registry.Removed:
				t.Fatalf("entry expired while the agent was refreshing it (after %d registers)", p.count(registry.OpRegister, e.Key()))
			}
		case <-time.After(time.Until(observeUntil)):
		}
	}
	if !added {
		t.Fatal("never registered")
	}
	if n := p.count(registry.OpRegister, e.Key()); n < 3 {
		t.Fatalf("%d registers in 2.5 TTLs; want refreshes", n)
	}

	// Killed: no write reaches the registry any more, not even the shutdown removal.
	p.dead.Store(true)
	if err := a.stop(t); !errors.Is(err, errUnreachable) {
		t.Fatalf("Run = %v; want the failed shutdown removal reported", err)
	}
	for {
		select {
		case ev := <-events:
			if ev.Type == registry.Removed {
				return // expired by TTL
			}
		case <-ctx.Done():
			t.Fatal("entry of a killed agent did not expire")
		}
	}
}

func TestShutdownUnregisters(t *testing.T) {
	r := newMemory(t)
	web := ep("web", "10.0.0.1", 80, 0)
	db := ep("db", "10.0.0.2", 5432, time.Minute)
	never := ep("never", "10.0.0.3", 1, 0)
	neverCheck := check.Spec{Kind: check.Exec, Argv: []string{"false"}, Interval: time.Second}
	other := ep("other", "10.0.0.9", 80, 0) // registered by someone else
	if err := r.Apply(context.Background(), []registry.Op{registry.Register(other)}); err != nil {
		t.Fatal(err)
	}
	a := start(t, manifestOf(mentry(web), mentry(db), mentry(never, neverCheck)), Options{Publisher: r})
	eventually(t, "registered", func() bool { return listed(t, r, web.Key()) && listed(t, r, db.Key()) })
	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for _, e := range []endpoint.Endpoint{web, db} {
		if listed(t, r, e.Key()) {
			t.Errorf("%s still registered after shutdown", e.Key())
		}
	}
	if !listed(t, r, other.Key()) {
		t.Error("shutdown removed an entry this agent did not register")
	}
}

func TestReload(t *testing.T) {
	r := newMemory(t)
	a1 := ep("a", "10.0.0.1", 80, 0)
	b1 := ep("b", "10.0.0.2", 80, 0)
	c1 := ep("c", "10.0.0.3", 80, 0)
	a := start(t, manifestOf(mentry(a1), mentry(b1)), Options{Publisher: r})
	eventually(t, "registered", func() bool { return listed(t, r, a1.Key()) && listed(t, r, b1.Key()) })

	b2 := b1
	b2.Priority = 9
	a.a.Reload(manifestOf(mentry(b2), mentry(c1)))
	eventually(t, "a removed, c added, b updated", func() bool {
		eps, _ := r.List(context.Background(), endpoint.Filter{Service: "b"})
		return !listed(t, r, a1.Key()) && listed(t, r, c1.Key()) && len(eps) == 1 && eps[0].Priority == 9
	})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if eps, _ := r.List(context.Background(), endpoint.Filter{}); len(eps) != 0 {
		t.Fatalf("after shutdown the registry holds %v", eps)
	}
}

func TestWriteRetry(t *testing.T) {
	r := newMemory(t)
	p := &recorder{r: r}
	p.fail.Store(3)
	e := ep("web", "10.0.0.1", 80, 0)
	start(t, manifestOf(mentry(e)), Options{Publisher: p, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	eventually(t, "registered after failed writes", func() bool { return listed(t, r, e.Key()) })
	if p.fail.Load() != 0 {
		t.Fatal("registered without going through the failures")
	}
}

func TestRunMetricsAndHealthz(t *testing.T) {
	r := newMemory(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e := ep("web", "10.0.0.1", 80, 0)
	go func() {
		done <- Run(ctx, Config{Manifest: manifestOf(mentry(e, check.Spec{Kind: check.Exec, Argv: []string{"true"}})), Registry: r, HTTP: ln})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	base := "http://" + ln.Addr().String()
	if body := get(t, base+"/healthz"); body != "ok\n" {
		t.Errorf("/healthz = %q", body)
	}
	want := `switchboard_agent_entry_registered{instance="` + e.InstanceID() + `",service="web"} 1`
	eventually(t, "registered metric", func() bool { return strings.Contains(get(t, base+"/metrics"), want) })
	m := get(t, base+"/metrics")
	for _, s := range []string{"switchboard_agent_entries 1", `switchboard_agent_checks_total{kind="exec",result="pass"}`, `switchboard_agent_registry_writes_total{op="register",result="ok"}`, "go_goroutines"} {
		if !strings.Contains(m, s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}
}

// collecting is a registry backend with series of its own, as the registrar
// client has.
type collecting struct{ registry.Registry }

var cacheAge = prometheus.NewDesc("agent_registrar_cache_age_seconds", "test", nil, nil)

func (collecting) Describe(ch chan<- *prometheus.Desc) { ch <- cacheAge }
func (collecting) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(cacheAge, prometheus.GaugeValue, 7)
}

func TestRunExportsTheBackendsMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Manifest: manifestOf(), Registry: collecting{newMemory(t)}, HTTP: ln})
	}()
	defer func() {
		cancel()
		<-done
	}()
	eventually(t, "the backend's series on /metrics", func() bool {
		return strings.Contains(get(t, "http://"+ln.Addr().String()+"/metrics"), "agent_registrar_cache_age_seconds 7")
	})
}

func TestRunNeedsRegistryForOutputs(t *testing.T) {
	err := Run(context.Background(), Config{Outputs: []Output{nil}})
	if err == nil || !strings.Contains(err.Error(), "registry backend is required") {
		t.Fatalf("Run = %v", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestResyncEntriesWithoutTTL(t *testing.T) {
	r := newMemory(t)
	p := &recorder{r: r}
	e := ep("web", "10.0.0.1", 80, 0)
	start(t, manifestOf(mentry(e)), Options{Publisher: p, Resync: 50 * time.Millisecond})
	eventually(t, "registered", func() bool { return listed(t, r, e.Key()) })
	// Someone (a stream's MaxAge, a restarted backend) drops it: the agent restores it.
	if err := r.Apply(context.Background(), []registry.Op{registry.Unregister(e)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "restored by resync", func() bool { return listed(t, r, e.Key()) && p.count(registry.OpRegister, e.Key()) >= 2 })
}

func TestRunReload(t *testing.T) {
	r := newMemory(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.yaml")
	const a = "  - {cluster: prod, service: a, protocol: http, address: 10.0.0.1, port: 80, ttl: 1s}\n"
	const b = "  - {cluster: prod, service: b, protocol: http, address: 10.0.0.2, port: 80}\n"
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("entries:\n" + a)
	m, err := manifest.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Manifest: m, ManifestPath: path, Registry: r, HTTP: ln, Reload: reload})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	ka := endpoint.Key{Cluster: "prod", Service: "a", Protocol: "http", Address: "10.0.0.1", Port: 80}
	kb := endpoint.Key{Cluster: "prod", Service: "b", Protocol: "http", Address: "10.0.0.2", Port: 80}
	eventually(t, "a registered", func() bool { return listed(t, r, ka) })

	write("entries:\n" + a + b)
	reload <- struct{}{}
	eventually(t, "b registered after reload", func() bool { return listed(t, r, kb) })

	write("entries:\n  - {cluster: prod, service: a, port: eighty}\n")
	reload <- struct{}{}
	metrics := "http://" + ln.Addr().String() + "/metrics"
	eventually(t, "apply failure reported", func() bool {
		return strings.Contains(get(t, metrics), "switchboard_agent_manifest_apply_failed 1")
	})
	eventually(t, "a expires: no refresh while the last apply failed", func() bool { return !listed(t, r, ka) })

	write("entries:\n" + a)
	reload <- struct{}{}
	eventually(t, "a back, b removed", func() bool { return listed(t, r, ka) && !listed(t, r, kb) })
}
