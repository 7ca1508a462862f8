package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the children: the program re-executes
// itself (os.Executable) with "child" first.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(childMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := parseOptions([]string{"-ttl", "30s", "-registrars", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.conns != 6 || o.settle != 10*time.Second || o.lossWindow != 40*time.Second {
		t.Errorf("defaults: conns %d settle %s loss window %s; want 6, 10s, 40s", o.conns, o.settle, o.lossWindow)
	}
	if o.memberWindow != 73*time.Second {
		t.Errorf("etcd leader loss window %s, want 2×30s+3s+10s", o.memberWindow)
	}
	if !slices.Equal(o.phases, allPhases) {
		t.Errorf("phases %v, want %v", o.phases, allPhases)
	}
}

func TestParseOptionsLossWindow(t *testing.T) {
	o, err := parseOptions([]string{"-backend", "jetstream", "-ttl", "30s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.memberWindow != 40*time.Second {
		t.Errorf("jetstream member window %s, want 40s", o.memberWindow)
	}
	o, err = parseOptions([]string{"-loss-window", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.lossWindow != 5*time.Second || o.memberWindow != 5*time.Second {
		t.Errorf("given window: %s, %s", o.lossWindow, o.memberWindow)
	}
}

func TestParseOptionsPhasesRunInOrder(t *testing.T) {
	o, err := parseOptions([]string{"-phases", "member, steady"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"steady", "member"}; !slices.Equal(o.phases, want) {
		t.Errorf("phases %v, want %v", o.phases, want)
	}
	if !o.has("member") || o.has("replica") {
		t.Errorf("has: %v", o.phases)
	}
}

func TestParseOptionsRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-backend", "dynamodb"},
		{"-phases", "steady,chaos"},
		{"-phases", ","},
		{"-clusters", "0"},
		{"-ttl", "1s"},
		{"-member", "random"},
		{"-duration", "0s"},
		{"stray"},
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func durations(ms ...int) []time.Duration {
	var d []time.Duration
	for _, m := range ms {
		d = append(d, time.Duration(m)*time.Millisecond)
	}
	return d
}

func TestSummarizeNearestRank(t *testing.T) {
	// 1..100 ms, shuffled: p50 is the 50th value, p99 the 99th.
	var ms []int
	for i := 100; i >= 1; i-- {
		ms = append(ms, i)
	}
	s := summarize(durations(ms...))
	if s.N != 100 || s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("got %+v", s)
	}
	// Fewer than 100 values: p99 is the maximum, never an interpolation.
	s = summarize(durations(3, 1, 2))
	if s.P50 != 2*time.Millisecond || s.P99 != 3*time.Millisecond {
		t.Errorf("three values: got %+v", s)
	}
	if s := summarize(nil); s.N != 0 || s.String() != "no sample" {
		t.Errorf("empty: got %+v %q", s, s)
	}
	if got := percentile(durations(7), 50); got != 7*time.Millisecond {
		t.Errorf("one value: p50 %s", got)
	}
}

func TestSummarizeKeepsInput(t *testing.T) {
	in := durations(3, 1, 2)
	summarize(in)
	if !slices.Equal(in, durations(3, 1, 2)) {
		t.Errorf("input reordered: %v", in)
	}
}

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func TestLostEntries(t *testing.T) {
	expected := []string{"d", "a", "b", "c"}
	lost := lostEntries(expected,
		set("b", "x"),           // b vanished and came back: lost all the same; x was never expected
		set("a", "b", "d", "x"), // c is missing at the end
	)
	if want := []string{"b", "c"}; !slices.Equal(lost, want) {
		t.Errorf("lost %v, want %v", lost, want)
	}
	if lost := lostEntries(expected, nil, set(expected...)); len(lost) != 0 {
		t.Errorf("nothing vanished, everything visible: lost %v", lost)
	}
}

func TestRate(t *testing.T) {
	if r := rate(300, 30*time.Second); r != 10 {
		t.Errorf("rate %v", r)
	}
	if r := rate(1, 0); r != 0 {
		t.Errorf("rate over nothing %v", r)
	}
}

func TestTapSeen(t *testing.T) {
	f := &fleet{seen: make(chan seenLine, 4)}
	if f.tapSeen("count {}") {
		t.Error("took a reply")
	}
	if !f.tapSeen("seen c2 k7 1700000000000000000") || len(f.seen) != 1 {
		t.Fatal("did not take a sighting")
	}
	if s := <-f.seen; s.cluster != "c2" || s.id != "k7" || s.at.UnixNano() != 1700000000000000000 {
		t.Errorf("got %+v", s)
	}
	if !f.tapSeen("seen garbage") || len(f.seen) != 0 {
		t.Error("a malformed sighting must be taken and dropped")
	}
}

func TestFleetShape(t *testing.T) {
	keys := expectedKeys(1, 25, 10)
	if len(keys) != 25 || len(set(keys...)) != 25 {
		t.Fatalf("keys not distinct: %v", keys)
	}
	e := fleetEndpoint(1, 24, 10, time.Minute)
	if e.Cluster != "c2" || e.Node != "node-2" || e.Key().String() != keys[24] {
		t.Errorf("endpoint 24 of c2: %+v", e)
	}
	if err := e.Validate(); err != nil {
		t.Error(err)
	}
	if err := probeEndpoint(0, "k1", time.Minute).Validate(); err != nil {
		t.Error(err)
	}
}

// TestTinyFleet runs the whole program on etcd: 1 cluster × 1 registrar × 50
// endpoints, every phase (replica is skipped: one replica has no other to re-home
// to). About 20 s of servers, so not under -short.
func TestTinyFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster and 5 processes (about 20 s)")
	}
	out := filepath.Join(t.TempDir(), "fleet.md")
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-backend", "etcd", "-clusters", "1", "-registrars", "1", "-endpoints", "50",
			"-ttl", "3s", "-settle", "1s", "-duration", "2s", "-changes", "3", "-loss-window", "4s",
			"-timeout", "90s", "-out", out})
	}()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the run outlived its own -timeout")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{"backend writes/s (revisions)", "backend key writes/s (puts)", "registrar RSS",
		"cross-cluster propagation", "backend write gap after SIGKILL", "registrar acknowledgement gap", "entries lost (watchers) | 0 of 50 watched"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "**no**") || strings.Contains(report, "n/a") {
		t.Errorf("a goal was not met or a figure not read:\n%s", report)
	}
}
