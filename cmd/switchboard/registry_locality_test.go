package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// TestRegistryZoneAndHealth: `registry register` writes region, zone and health;
// `registry lookup` shows zone and health in every format and filters by them.
func TestRegistryZoneAndHealth(t *testing.T) {
	f := startNATS(t)
	register := func(addr, zone, health string) {
		t.Helper()
		args := []string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http",
			"--address", addr, "--port", "80", "--region", "eu-west", "--zone", zone}
		if health != "" {
			args = append(args, "--health", health)
		}
		if _, errOut, code := run(t, append(args, f.flags...)...); code != 0 {
			t.Fatalf("register %s: exit %d: %s", addr, code, errOut)
		}
	}
	register("10.0.0.1", "eu-west-1a", "")
	register("10.0.0.2", "eu-west-1a", "draining")
	register("10.0.0.3", "eu-west-1b", "Unhealthy")

	lookup := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append(append([]string{"registry", "lookup", "--service", "web"}, args...), f.flags...)...)
		if code != 0 {
			t.Fatalf("lookup %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	table := lookup()
	header, rows, _ := strings.Cut(table, "\n")
	if !strings.Contains(header, "ZONE") || !strings.Contains(header, "HEALTH") {
		t.Fatalf("table header %q lacks ZONE and HEALTH", header)
	}
	for _, want := range [][]string{{"10.0.0.1", "eu-west-1a", "healthy"}, {"10.0.0.2", "eu-west-1a", "draining"}, {"10.0.0.3", "eu-west-1b", "unhealthy"}} {
		if !hasRow(rows, want...) {
			t.Errorf("table lacks a row with %v:\n%s", want, table)
		}
	}

	for _, c := range []struct {
		args []string
		want []string // addresses
	}{
		{[]string{"--zone", "eu-west-1a"}, []string{"10.0.0.1", "10.0.0.2"}},
		{[]string{"--health", "draining"}, []string{"10.0.0.2"}},
		{[]string{"--zone", "eu-west-1a", "--health", "healthy"}, []string{"10.0.0.1"}},
		{[]string{"--zone", "eu-west-1c"}, nil},
		{[]string{"--zone", "1"}, nil}, // a zone only another writer could store (Azure's) is a valid filter
		{[]string{"--zone", "*", "--health", "*"}, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
	} {
		var eps []endpoint.Endpoint
		if err := json.Unmarshal([]byte(lookup(append(c.args, "-o", "json")...)), &eps); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range eps {
			got = append(got, e.Address)
			if e.Region != "eu-west" {
				t.Errorf("%s: region %q, want eu-west", e.Address, e.Region)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("lookup %v -o json = %v, want %v", c.args, got, c.want)
		}
	}
	if y := lookup("--health", "draining", "-o", "yaml"); !strings.Contains(y, "  zone: eu-west-1a\n") || !strings.Contains(y, "  health: draining\n") {
		t.Errorf("lookup -o yaml lacks zone and health:\n%s", y)
	}
}

// TestRegistryRegion: `registry lookup` shows each endpoint's region in a column of
// its own and filters by it, as it does by zone.
func TestRegistryRegion(t *testing.T) {
	f := startNATS(t)
	for _, r := range []struct{ addr, region, zone string }{
		{"10.0.0.1", "eu-west", "eu-west-1a"}, {"10.0.0.2", "us-east", "us-east-1a"}, {"10.0.0.3", "", ""},
	} {
		args := []string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http",
			"--address", r.addr, "--port", "80", "--region", r.region, "--zone", r.zone}
		if _, errOut, code := run(t, append(args, f.flags...)...); code != 0 {
			t.Fatalf("register %s: exit %d: %s", r.addr, code, errOut)
		}
	}
	lookup := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append(append([]string{"registry", "lookup", "--service", "web"}, args...), f.flags...)...)
		if code != 0 {
			t.Fatalf("lookup %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	table := lookup()
	header, rows, _ := strings.Cut(table, "\n")
	if cols := strings.Fields(header); !slices.Contains(cols, "REGION") || slices.Index(cols, "REGION") > slices.Index(cols, "ZONE") {
		t.Fatalf("table header %q lacks REGION before ZONE", header)
	}
	for _, want := range [][]string{{"10.0.0.1", "eu-west", "eu-west-1a"}, {"10.0.0.2", "us-east", "us-east-1a"}, {"10.0.0.3", "-", "-"}} {
		if !hasRow(rows, want...) {
			t.Errorf("table lacks a row with %v:\n%s", want, table)
		}
	}
	for _, c := range []struct {
		args []string
		want []string // addresses
	}{
		{[]string{"--region", "eu-west"}, []string{"10.0.0.1"}},
		{[]string{"--region", "us-east", "--zone", "us-east-1a"}, []string{"10.0.0.2"}},
		{[]string{"--region", "us-east", "--zone", "eu-west-1a"}, nil},
		{[]string{"--region", "dc1.eu"}, nil}, // a region only another writer could store is a valid filter
		{[]string{"--region", "*"}, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
	} {
		var eps []endpoint.Endpoint
		if err := json.Unmarshal([]byte(lookup(append(c.args, "-o", "json")...)), &eps); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range eps {
			got = append(got, e.Address)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("lookup %v -o json = %v, want %v", c.args, got, c.want)
		}
	}
	if out := lookup("--region", "us-east"); !hasRow(out, "10.0.0.2", "us-east") || hasRow(out, "10.0.0.1") {
		t.Errorf("lookup --region us-east, table:\n%s", out)
	}
}

// TestRegistryWatchZoneAndHealth: `registry watch` filters by region, zone and
// health as lookup does, and keeps its view what lookup would list: an endpoint
// that stops matching is printed as removed, one that starts matching as added,
// and an endpoint that never matches is never printed.
func TestRegistryWatchZoneAndHealth(t *testing.T) {
	f := startNATS(t)
	register := func(addr, zone, health, weight string) {
		t.Helper()
		args := []string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http",
			"--address", addr, "--port", "80", "--region", "eu-west", "--zone", zone, "--health", health, "--weight", weight}
		if _, errOut, code := run(t, append(args, f.flags...)...); code != 0 {
			t.Fatalf("register %s: exit %d: %s", addr, code, errOut)
		}
	}
	register("10.0.0.1", "eu-west-1a", "healthy", "0")
	register("10.0.0.2", "eu-west-1b", "healthy", "0")
	register("10.0.0.3", "eu-west-1a", "draining", "0")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &syncbuf.Buffer{}
	watch := newRootCmd(out, out)
	watch.SetArgs(append([]string{"registry", "watch", "--service", "web", "--region", "eu-west", "--zone", "eu-west-1a", "--health", "healthy"}, f.flags...))
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { done <- watch.ExecuteContext(wctx) }()
	waitFor(t, out, `"type":"synced"`)

	register("10.0.0.1", "eu-west-1a", "draining", "0") // stops matching
	waitFor(t, out, `"type":"removed"`)
	register("10.0.0.2", "eu-west-1b", "draining", "0") // never matches
	register("10.0.0.3", "eu-west-1a", "healthy", "0")  // starts matching
	register("10.0.0.3", "eu-west-1a", "healthy", "5")  // changes while matching
	waitFor(t, out, `"type":"updated"`)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("interrupted watch returned %v", err)
	}

	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev struct {
			Type     string             `json:"type"`
			Endpoint *endpoint.Endpoint `json:"endpoint"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if ev.Endpoint != nil {
			ev.Type += " " + ev.Endpoint.Address
		}
		got = append(got, ev.Type)
	}
	want := []string{"added 10.0.0.1", "synced", "removed 10.0.0.1", "added 10.0.0.3", "updated 10.0.0.3"}
	if !slices.Equal(got, want) {
		t.Fatalf("watch --region eu-west --zone eu-west-1a --health healthy printed\n  %s\nwant\n  %s\n%s",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "), out.String())
	}
}

// hasRow reports whether a line of the table holds every cell of want.
func hasRow(table string, want ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Fields(line)
		ok := true
		for _, w := range want {
			ok = ok && slices.Contains(cells, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestRegistryLocalityUsageErrors: a bad zone, region or health is a usage error
// that names the flag, before any backend is opened.
func TestRegistryLocalityUsageErrors(t *testing.T) {
	reg := []string{"registry", "register", "--registry-backend", "jetstream", "--nats-url", "nats://127.0.0.1:1",
		"--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.1"}
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"lookup health", []string{"registry", "lookup", "--registry-backend", "memory", "--health", "sick"}, `--health: invalid endpoint: health "sick"`},
		{"lookup zone", []string{"registry", "lookup", "--registry-backend", "memory", "--zone", "eu west"}, `--zone "eu west": want at most 253 printable characters without spaces`},
		{"lookup region", []string{"registry", "lookup", "--registry-backend", "memory", "--region", "eu west"}, `--region "eu west": want at most 253 printable characters without spaces`},
		{"watch health", []string{"registry", "watch", "--registry-backend", "memory", "--health", "sick"}, `--health: invalid endpoint: health "sick"`},
		{"watch zone", []string{"registry", "watch", "--registry-backend", "memory", "--zone", "eu west"}, `--zone "eu west": want at most 253 printable characters without spaces`},
		{"register health", append(slices.Clone(reg), "--health", "sick"), `--health: invalid endpoint: health "sick"`},
		{"register zone", append(slices.Clone(reg), "--zone", "eu.west"), `zone "eu.west"`},
		{"register region", append(slices.Clone(reg), "--region", "-x"), `region "-x"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, c.args...)
			if code == 0 || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d, stderr %q (want it to contain %q), stdout %q", code, errOut, c.msg, out)
			}
		})
	}
}

// TestRegistryHealthCompletion: --health completes with the states' names.
func TestRegistryHealthCompletion(t *testing.T) {
	for _, cmd := range []string{"lookup", "register", "watch"} {
		out, _, code := run(t, "__complete", "registry", cmd, "--health", "")
		if code != 0 {
			t.Fatalf("%s: exit %d", cmd, code)
		}
		for _, h := range []string{"healthy", "draining", "unhealthy"} {
			if !strings.Contains(out, h+"\n") {
				t.Errorf("registry %s --health completes %q, want %s among them", cmd, out, h)
			}
		}
	}
}

// TestRegistryHelpNamesLocalityFlags: --help documents the new flags.
func TestRegistryHelpNamesLocalityFlags(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"lookup":   {"--region", "--zone", "--health"},
		"register": {"--region", "--zone", "--health"},
		"watch":    {"--region", "--zone", "--health"},
	} {
		out, _, code := run(t, "registry", cmd, "--help")
		for _, f := range flags {
			if code != 0 || !strings.Contains(out, f) {
				t.Errorf("registry %s --help lacks %s:\n%s", cmd, f, out)
			}
		}
	}
}
