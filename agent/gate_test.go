package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestGate(t *testing.T) {
	open := GateInput{Entries: 1, ChecksOK: true}
	tests := []struct {
		name   string
		in     GateInput
		open   bool
		reason string
	}{
		{"all conditions met", open, true, ""},
		{"no entries", GateInput{Entries: 0, ChecksOK: true}, false, ReasonNoEntries},
		{"no-op mode", GateInput{Entries: 1, NoOp: true, ChecksOK: true}, false, ReasonNoOp},
		{"last apply failed", GateInput{Entries: 1, ApplyFailed: true, ChecksOK: true}, false, ReasonApplyFailed},
		{"a check failing", GateInput{Entries: 1}, false, ReasonUnhealthy},
		{"checks not passing yet", GateInput{Entries: 1, ChecksPending: true}, false, ReasonPending},
		{"pending, but the last apply failed", GateInput{Entries: 1, ApplyFailed: true, ChecksPending: true}, false, ReasonApplyFailed},
		{"everything wrong", GateInput{NoOp: true, ApplyFailed: true}, false, ReasonNoEntries},
	}
	for _, tc := range tests {
		got, reason := Gate(tc.in)
		if got != tc.open || reason != tc.reason {
			t.Errorf("%s: Gate(%+v) = %v, %q; want %v, %q", tc.name, tc.in, got, reason, tc.open, tc.reason)
		}
	}
}

// The gate conditions, each through a running agent.

func TestGateOpenWithoutChecks(t *testing.T) {
	r := newMemory(t)
	e := ep("web", "10.0.0.1", 80, 0)
	a := start(t, manifestOf(mentry(e)), Options{Publisher: r})
	eventually(t, "entry without checks registered", func() bool { return listed(t, r, e.Key()) })
	s, _ := status(a.a, e.Key())
	if !s.Healthy || !s.Registered || s.Reason != "" {
		t.Errorf("status = %+v; want healthy, registered, gate open", s)
	}
}

func TestGateNoEntries(t *testing.T) {
	p := &recorder{}
	a := start(t, manifestOf(), Options{Publisher: p})
	// Let the loop run several steps: a reload with an empty list is one of them.
	a.a.Reload(manifestOf())
	eventually(t, "reload applied", func() bool { return len(a.a.Status()) == 0 })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := p.total(); n != 0 {
		t.Fatalf("empty manifest wrote %d ops", n)
	}
}

func TestGateDryRun(t *testing.T) {
	p := &recorder{}
	var logs logBuffer
	e := ep("web", "10.0.0.1", 80, time.Second)
	good := mentry(e, check.Spec{Kind: check.Exec, Argv: []string{"true"}, Interval: 20 * time.Millisecond})
	a := start(t, manifestOf(good), Options{Publisher: p, DryRun: true, Logger: newLogger(&logs)})
	eventually(t, "check passed", func() bool { s, _ := status(a.a, e.Key()); return s.Healthy })
	s, _ := status(a.a, e.Key())
	if s.Reason != ReasonNoOp || s.Registered {
		t.Errorf("status = %+v; want gate closed for dry-run", s)
	}
	eventually(t, "dry-run log", func() bool { return logs.count("dry-run: would register") == 1 })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := p.total(); n != 0 {
		t.Fatalf("dry-run wrote %d ops (register or unregister)", n)
	}
}

func TestGateApplyFailed(t *testing.T) {
	r := newMemory(t)
	p := &recorder{r: r}
	e := ep("web", "10.0.0.1", 80, time.Second) // refreshed every ~333ms while the gate is open
	m := manifestOf(mentry(e))
	a := start(t, m, Options{Publisher: p})
	eventually(t, "registered", func() bool { return listed(t, r, e.Key()) })
	eventually(t, "refreshed", func() bool { return p.count(registry.OpRegister, e.Key()) >= 2 })

	a.a.ReloadFailed(errors.New("line 3: entries[0].port: want an integer"))
	eventually(t, "gate closed", func() bool { s, _ := status(a.a, e.Key()); return s.Reason == ReasonApplyFailed })
	// With refreshing stopped the entry expires; an agent that kept refreshing would
	// keep it forever.
	eventually(t, "entry expired", func() bool { return !listed(t, r, e.Key()) })
	if n := p.count(registry.OpUnregister, e.Key()); n != 0 {
		t.Errorf("a failed apply removed the entry actively (%d unregisters); it should only stop refreshing", n)
	}

	a.a.Reload(m)
	eventually(t, "registered again after a good apply", func() bool { return listed(t, r, e.Key()) })
}

func TestGateChecks(t *testing.T) {
	r := newMemory(t)
	good := ep("good", "10.0.0.1", 80, 0)
	bad := ep("bad", "10.0.0.2", 80, 0)
	mixed := ep("mixed", "10.0.0.3", 80, 0)
	pass := check.Spec{Kind: check.Exec, Argv: []string{"true"}, Interval: 20 * time.Millisecond}
	fail := check.Spec{Kind: check.Exec, Argv: []string{"false"}, Interval: 20 * time.Millisecond}
	a := start(t, manifestOf(mentry(good, pass), mentry(bad, fail), mentry(mixed, pass, fail)), Options{Publisher: r})
	eventually(t, "passing entry registered", func() bool { return listed(t, r, good.Key()) })
	eventually(t, "failing checks observed", func() bool {
		sb, _ := status(a.a, bad.Key())
		sm, _ := status(a.a, mixed.Key())
		return sb.Checks[0].LastError != "" && sm.Checks[1].LastError != "" && sm.Checks[0].Healthy
	})
	for name, k := range map[string]endpoint.Key{"all checks failing": bad.Key(), "one of two failing": mixed.Key()} {
		if listed(t, r, k) {
			t.Errorf("%s: registered", name)
		}
		if s, _ := status(a.a, k); s.Reason != ReasonUnhealthy || s.Healthy {
			t.Errorf("%s: status %+v; want gate closed, unhealthy", name, s)
		}
	}
}

func TestNoopPublisherLoggedOnce(t *testing.T) {
	var logs logBuffer
	e := ep("web", "10.0.0.1", 80, time.Second)
	a := start(t, manifestOf(mentry(e)), Options{Logger: newLogger(&logs)})
	eventually(t, "entry passes the gate", func() bool { s, _ := status(a.a, e.Key()); return s.Registered })
	// Several refreshes later, still one line.
	time.Sleep(800 * time.Millisecond)
	if err := a.stop(t); err != nil {
		t.Fatalf("shutdown with the no-op publisher: %v", err)
	}
	if n := logs.count("no-op publisher"); n != 1 {
		t.Fatalf("no-op publisher mentioned %d times, want once:\n%s", n, logs.String())
	}
}

// Until a check has said anything, or while its passes climb to its rise threshold,
// the gate waits for it: status and log say so, and do not call the check failing.
// A check that has failed says so.
func TestGateWaitsForChecksToPass(t *testing.T) {
	r := newMemory(t)
	var logs logBuffer
	slow := ep("slow", "10.0.0.1", 80, 0)
	bad := ep("bad", "10.0.0.2", 80, 0)
	// The first result of a check that sleeps is a while coming.
	waiting := check.Spec{Kind: check.Exec, Argv: []string{"sleep", "30"}, Interval: time.Minute, Timeout: time.Minute}
	fail := check.Spec{Kind: check.Exec, Argv: []string{"false"}, Interval: 20 * time.Millisecond}
	a := start(t, manifestOf(mentry(slow, waiting), mentry(bad, fail)), Options{Publisher: r, Logger: newLogger(&logs)})
	eventually(t, "the failing check observed", func() bool {
		s, ok := status(a.a, bad.Key())
		return ok && s.Checks[0].LastError != ""
	})
	if s, _ := status(a.a, slow.Key()); s.Reason != ReasonPending || s.Healthy || s.Registered {
		t.Errorf("an entry whose check has not answered: status %+v; want the gate waiting for its checks", s)
	}
	if s, _ := status(a.a, bad.Key()); s.Reason != ReasonUnhealthy {
		t.Errorf("an entry whose check fails: status %+v; want the gate closed on failing checks", s)
	}
	want := `msg="publish gate closed" entry=prod/slow/http/10.0.0.1:80 reason="waiting for health checks to pass"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log has no line %q:\n%s", want, logs.String())
	}
}
