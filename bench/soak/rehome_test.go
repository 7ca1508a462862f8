package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/bench/internal/promtext"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// With liveness on, the registry lane kills a holding registrar for longer than its
// hold lives, and longer than an entry's default TTL: its entries outlast the kill
// only if they are taken over. With liveness off the lane draws what it drew before.
func TestPlanKillsHoldingRegistrarsPastTheirHold(t *testing.T) {
	o := options{livenessTTL: 5 * time.Second}
	if err := o.ttlDefaults(); err != nil {
		t.Fatal(err)
	}
	sh := shape{replicas: 2, members: 1, nodes: 24, livenessTTL: o.livenessTTL}
	kills := 0
	for _, lane := range plan(42, 10*time.Minute, sh, 1) {
		for _, f := range lane {
			if f.kind != killHolding {
				continue
			}
			kills++
			if f.hold < o.livenessTTL+2*time.Second || f.hold > o.livenessTTL+6*time.Second {
				t.Fatalf("%s held %s, want within [ttl+2s, ttl+6s] of liveness ttl %s", f.kind, f.hold, o.livenessTTL)
			}
			if f.hold <= o.ttl {
				t.Fatalf("%s held %s, not longer than the entries' ttl %s: they could outlive it on their own", f.kind, f.hold, o.ttl)
			}
			if len(f.targets) != 1 || f.targets[0] >= sh.replicas {
				t.Fatalf("%s targets %v", f.kind, f.targets)
			}
		}
	}
	if kills == 0 {
		t.Fatal("ten minutes planned no kill of a holding registrar")
	}
	sh.livenessTTL = 0
	off := plan(42, 10*time.Minute, sh, 1)
	before := lanes(false, 0)
	if !reflect.DeepEqual(before[0].kinds, []faultKind{killRegistrar, killAllRegistrars, killBackend, killBoth, stallWatcher, calm, freezeRegistrar, freezeBackend}) {
		t.Fatalf("registry lane without liveness: %v", before[0].kinds)
	}
	for _, lane := range off {
		for _, f := range lane {
			if f.kind == killHolding {
				t.Fatalf("liveness off, yet planned %+v", f)
			}
		}
	}
	if o := (options{}); o.ttlDefaults() != nil || o.ttl != time.Minute {
		t.Fatalf("liveness off: ttl %s, want 1m", o.ttl)
	}
	if err := (&options{livenessTTL: time.Second}).ttlDefaults(); err == nil {
		t.Fatal("a liveness ttl of 1s was accepted (the registrar wants 3s at least)")
	}
}

// The registrar child builds its configuration with the soak's liveness TTL and
// serves its metrics where the soak reads them.
func TestRegistrarChildHoldsWithTheLivenessTTL(t *testing.T) {
	rc := registrarChild{backend: "etcd", urls: []string{"http://127.0.0.1:1"}, listen: "127.0.0.1:0", healthListen: "127.0.0.1:0", livenessTTL: 5 * time.Second}
	cfg := rc.serverConfig(nil, slog.New(slog.DiscardHandler))
	if cfg.Registrar.LivenessTTL != 5*time.Second || cfg.HealthListen != rc.healthListen {
		t.Fatalf("liveness ttl %s, health listen %q", cfg.Registrar.LivenessTTL, cfg.HealthListen)
	}
	s := &system{o: options{livenessTTL: 5 * time.Second}}
	args := s.holdArgs("127.0.0.1:9999")
	if want := []string{"-health-listen", "127.0.0.1:9999", "-liveness-ttl", "5s"}; !reflect.DeepEqual(args, want) || s.metrics[0] != "http://127.0.0.1:9999/metrics" {
		t.Fatalf("child args %v, metrics %v", args, s.metrics)
	}
}

// The held entries are read from the registrar's /metrics, among other series.
func TestHeldWatchReadsTheGauge(t *testing.T) {
	body := "# HELP registrar_held_entries Entries…\n# TYPE registrar_held_entries gauge\nregistrar_held_entries 37\nregistrar_held_sessions 4\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	h := newHeldWatch([]string{srv.URL, "http://127.0.0.1:1/metrics"}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go h.run(ctx)
	for h.entries(0) != 37 {
		if ctx.Err() != nil {
			t.Fatalf("held entries of replica 0: %d after 10s, want 37", h.entries(0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h.entries(1) != 0 || h.most(1) != 0 {
		t.Fatalf("the unreachable replica: %d entries; most: %d", h.entries(1), h.most(1))
	}
	if _, err := promtext.Value(strings.NewReader("registrar_held_sessions 4\n"), heldMetric); err == nil {
		t.Fatal("a missing gauge parsed")
	}
}

// What the survivors took over is their rise while the victim is down, at most what
// the victim held; a kill of every registrar has nobody to take over and is not
// accounted.
func TestTakeoverAccount(t *testing.T) {
	h := newHeldWatch([]string{"a", "b", "c"}, slog.New(slog.DiscardHandler))
	h.observe(0, 90)
	h.observe(1, 50)
	h.observe(2, 30)
	if v := h.most(2); v != 0 {
		t.Fatalf("most: %d, want 0", v)
	}
	h.killing(fault{kind: killHolding, targets: []int{0}}, time.Minute)
	h.observe(1, 100)
	h.observe(2, 60)
	h.observe(1, 95) // an agent unregistered meanwhile
	h.healed(0, 150, nil)
	h.killing(fault{kind: killRegistrar, targets: []int{2}}, 2*time.Minute)
	h.observe(0, 0) // the first victim is back, holding nothing
	h.observe(1, 130)
	h.healed(2, -1, nil)
	h.killing(fault{kind: killAllRegistrars}, 3*time.Minute)
	ts, maxHeld := h.account()
	if len(ts) != 2 || maxHeld != 130 {
		t.Fatalf("account %+v, max held %d", ts, maxHeld)
	}
	if got := ts[0].takenOver(); got != 80 { // survivors 80 → 160
		t.Fatalf("first kill: %d taken over, want 80", got)
	}
	if got := ts[1].takenOver(); got != 35 { // 95 → 130 (the first victim's 90 gone with it), of the 60 the victim held
		t.Fatalf("second kill: %d taken over, want 35", got)
	}
	if h.entries(0) != 0 || h.entries(2) != 0 {
		t.Fatalf("after every registrar's kill: %d, %d", h.entries(0), h.entries(2))
	}
	text, missing := rehomeReport(5*time.Second, ts, maxHeld, holdLogs{taken: 4})
	if !strings.Contains(text, "entries taken over: 115") || !strings.Contains(text, "re-homing exercised: 1 kills") || len(missing) != 0 {
		t.Fatalf("report:\n%s", text)
	}
}

// A run that took no hold, or killed no registrar holding entries, or saw nothing
// taken over, says so instead of passing as a test of re-homing.
func TestRehomeReportSaysWhenNotExercised(t *testing.T) {
	for _, c := range []struct {
		name    string
		ts      []takeover
		taken   int
		refused int
		want    string
	}{
		{"no hold", []takeover{{kind: killHolding, checked: 10}}, 0, 3, "re-homing NOT exercised: no registrar took a hold (their logs say the backend cannot hold 3 times)"},
		{"no kill", nil, 3, 0, "re-homing NOT exercised: 0 kills"},
		{"nothing taken", []takeover{{kind: killHolding, victimHeld: 40, before: 10, peak: 10, checked: 40}}, 3, 0, "re-homing NOT exercised: 1 kills of a registrar holding entries, 0 entries taken over"},
	} {
		text, _ := rehomeReport(5*time.Second, c.ts, 0, holdLogs{taken: c.taken, refused: c.refused})
		if !strings.Contains(text, c.want) {
			t.Errorf("%s: report lacks %q:\n%s", c.name, c.want, text)
		}
	}
	if text, _ := rehomeReport(0, nil, 0, holdLogs{}); !strings.Contains(text, "liveness off") {
		t.Errorf("liveness off: %s", text)
	}
}

// The final count tells lost entries (missing or stale) from resurrected ones
// (unregistered by their agent, found again) and from entries nobody wrote.
func TestTallyTellsLostFromResurrected(t *testing.T) {
	o := newOracle()
	ep := func(addr string, w int) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: "east", Service: "svc0", Protocol: "http", Address: addr, Port: 8080, Node: "agent-0", Weight: w}
	}
	live, updated, gone := ep("10.0.0.1", 1), ep("10.0.0.2", 1), ep("10.0.0.3", 1)
	o.acked(0, opRegister, registry.Register(live), 1)
	o.acked(0, opRegister, registry.Register(updated), 1)
	o.acked(0, opRegister, registry.Register(ep("10.0.0.2", 2)), 1)
	o.acked(0, opRegister, registry.Register(gone), 1)
	o.acked(0, opUnregister, registry.Unregister(gone), 1)
	got := map[endpoint.Key]endpoint.Endpoint{updated.Key(): updated, gone.Key(): gone, ep("10.0.0.9", 1).Key(): ep("10.0.0.9", 1)}
	lost, resurrected, stray := tally(diff(o.snapshot(), got), o.written)
	if lost != 2 || resurrected != 1 || stray != 1 {
		t.Fatalf("lost %d, resurrected %d, stray %d; want 2, 1, 1", lost, resurrected, stray)
	}
	if e, ok := o.removed(); !ok || !endpoint.Equal(e, gone) {
		t.Fatalf("removed: %v %v", e, ok)
	}
}

// A refresh (the same content again) leaves a key's last change where it was: the
// checks that wait for a change to settle are not put off by keepalives.
func TestRefreshesDoNotMoveTheLastChange(t *testing.T) {
	o := newOracle()
	e := endpoint.Endpoint{Cluster: "east", Service: "svc0", Protocol: "http", Address: "10.0.0.1", Port: 8080, Node: "agent-0"}
	o.acked(0, opRegister, registry.Register(e), 1)
	first := o.changesAt()[e.Key()]
	time.Sleep(2 * time.Millisecond)
	o.acked(0, opRefresh, registry.Register(e), 1)
	if got := o.changesAt()[e.Key()]; !got.Equal(first) {
		t.Fatalf("a refresh moved the last change from %s to %s", first, got)
	}
	o.acked(0, opUnregister, registry.Unregister(e), 1)
	if got := o.changesAt()[e.Key()]; !got.After(first) {
		t.Fatal("an unregister did not move the last change")
	}
}

// The registrars' own lines say whether they hold, and what their liveness loop
// restored and removed.
func TestHoldLogsCountTheRegistrarsLines(t *testing.T) {
	var h holdLogs
	for _, l := range []string{
		`time=2026-12-06T01:22:34.256Z level=INFO msg="holding agents' entries by their sessions" component=registrar hold=etcd-lease-1 liveness_ttl=5s`,
		`time=2026-12-06T01:22:34.256Z level=INFO msg="the backend cannot hold entries by a replica's liveness; agents keep theirs alive by refreshing them" component=registrar`,
		`time=2026-12-06T01:22:35.000Z level=WARN msg="etcd: hold lease lost; granting a new one (the entries it held are gone)" hold=etcd-lease-1`,
		`time=2026-12-06T01:22:36.000Z level=INFO msg="registered again entries of live sessions the registry lost" component=registrar entries=17`,
		`time=2026-12-06T01:22:41.000Z level=INFO msg="registered again entries of live sessions the registry lost" component=registrar entries=3`,
		`time=2026-12-06T01:22:42.000Z level=INFO msg="removed entries of agents whose session ended" component=registrar entries=40`,
		`time=2026-12-06T01:22:42.000Z level=INFO msg="registrar ready" addr=127.0.0.1:1`,
	} {
		h.add(l)
	}
	if want := (holdLogs{taken: 1, refused: 1, dropped: 1, restored: 20, expired: 40}); h != want {
		t.Fatalf("counted %+v, want %+v", h, want)
	}
}
