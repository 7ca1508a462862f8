package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/agent/ui"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// runHTTP runs the agent with an HTTP listener until the test ends and returns the
// listener's base URL.
func runHTTP(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP = ln
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(wait):
			t.Error("the agent did not stop")
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String()
}

// pageState reads /ui/state.json.
func pageState(t *testing.T, base string) ui.State {
	t.Helper()
	var s ui.State
	if err := json.Unmarshal([]byte(get(t, base+"/ui/state.json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// pageUntil polls /ui/state.json until ok holds of it and returns that state; it
// fails with the last state seen if ok does not come to hold.
func pageUntil(t *testing.T, base, what string, ok func(ui.State) bool) ui.State {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		s := pageState(t, base)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s; the page's state: %+v", what, wait, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunServesThePage: the agent serves its page beside /metrics, and the page's
// state follows the agent: a check's results, counters and output, the entry
// withdrawn when the check fails and published again when it passes, and the
// rendered file's last update. The check gets a timeout of 500ms, so that a probe
// that is slow under load does not fail it, and what the test asserts of the
// state is waited for: another result may come in between two reads.
func TestRunServesThePage(t *testing.T) {
	r := newMemory(t)
	hc := newSwitchable(t, true)
	e := ep("web", "10.0.0.1", 80, 0)
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "up.tmpl")
	if err := os.WriteFile(tmpl, []byte(upstreamTmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := render.NewOutput(render.Spec{Template: tmpl, Out: filepath.Join(dir, "up.conf")})
	if err != nil {
		t.Fatal(err)
	}
	base := runHTTP(t, Config{Manifest: manifestOf(mentry(e, hc.spec(500*time.Millisecond, 1, 2))), Registry: r,
		Outputs: []Output{out}, Discovery: DiscoveryOptions{Debounce: 10 * time.Millisecond}})

	// The page lists the entry once the loop has published its first status.
	eventually(t, "/ui shows the entry", func() bool {
		return strings.Contains(get(t, base+"/ui"), `data-entry="prod/web/http/10.0.0.1:80"`)
	})
	get(t, base+"/metrics") // still served beside the page

	pageUntil(t, base, "published with a passing check, the file rendered", func(s ui.State) bool {
		if len(s.Entries) != 1 || len(s.Files) != 1 || s.Backend != "memory" || s.Registrar != nil || s.XDS != nil || s.DNS != nil {
			return false
		}
		en, f := s.Entries[0], s.Files[0]
		if en.State != ui.StatePublished || en.Source != "manifest" || en.Address != "10.0.0.1:80" || !en.GateOpen ||
			en.Since.IsZero() || len(en.Checks) != 1 {
			return false
		}
		c := en.Checks[0]
		return c.Healthy && c.Rise == 1 && c.Fall == 2 && c.Passes >= 1 && len(c.History) > 0 && c.Name == "http "+hc.srv.URL &&
			f.Kind == "template" && f.Path == filepath.Join(dir, "up.conf") && f.Error == "" && !f.Updated.IsZero() && !f.Written.IsZero()
	})

	hc.ok.Store(false)
	pageUntil(t, base, "withdrawn, the check failing with the endpoint's answer", func(s ui.State) bool {
		if len(s.Entries) != 1 || len(s.Entries[0].Checks) != 1 {
			return false
		}
		en := s.Entries[0]
		c := en.Checks[0]
		return en.State == ui.StateWithdrawn && en.Reason == ReasonUnhealthy && !c.Healthy && c.Failures >= 2 &&
			c.Output == "status 503, want 2xx" && !c.Changed.IsZero() && len(c.History) > 0 && !c.History[len(c.History)-1].OK
	})

	hc.ok.Store(true)
	pageUntil(t, base, "published again", func(s ui.State) bool { return len(s.Entries) == 1 && s.Entries[0].State == ui.StatePublished })
}

// TestRunWithoutThePage: with the page off, /ui is not found and the rest is
// served as before.
func TestRunWithoutThePage(t *testing.T) {
	base := runHTTP(t, Config{Manifest: manifestOf(), Registry: newMemory(t), UI: UIOptions{Disabled: true}})
	get(t, base+"/metrics")
	resp, err := http.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /ui with the page off = %d, want 404", resp.StatusCode)
	}
}

// TestThePageShowsTheRegistrarConnection: with the registrar backend, the page
// shows where the agent connects and, while nothing answers there, that it is not
// connected and why.
func TestThePageShowsTheRegistrarConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := registry.Open(ctx, "registrar", map[string]string{client.ParamAddress: "127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	base := runHTTP(t, Config{Manifest: manifestOf(), Registry: r})
	var s ui.State
	eventually(t, "the registrar's last error", func() bool {
		s = pageState(t, base)
		return s.Registrar != nil && s.Registrar.LastError != ""
	})
	if s.Backend != "registrar" || s.Registrar.Target != "127.0.0.1:1" || s.Registrar.Connected {
		t.Fatalf("registrar = %+v (backend %q)", s.Registrar, s.Backend)
	}
}

// TestEntryState: an entry's state in one word, from its status.
func TestEntryState(t *testing.T) {
	for _, tc := range []struct {
		st   EntryStatus
		want string
	}{
		{EntryStatus{Registered: true}, ui.StatePublished},
		{EntryStatus{Registered: true, Reason: ReasonUnhealthy}, ui.StatePublished}, // kept until its TTL runs out
		{EntryStatus{Held: true, Reason: "pod not Ready"}, ui.StateHeld},
		{EntryStatus{Reason: ReasonNoOp}, ui.StateDryRun},
		{EntryStatus{Held: true, Reason: ReasonNoOp}, ui.StateDryRun}, // dry-run writes nothing, held or not
		{EntryStatus{}, ui.StatePublishing},
		{EntryStatus{Reason: "starting"}, ui.StateWaiting},
		{EntryStatus{Reason: ReasonPending}, ui.StateWaiting},
		{EntryStatus{Reason: ReasonUnhealthy}, ui.StateWithdrawn},
		{EntryStatus{Reason: ReasonApplyFailed}, ui.StateWithdrawn},
	} {
		if got := entryState(tc.st); got != tc.want {
			t.Errorf("entryState(%+v) = %s, want %s", tc.st, got, tc.want)
		}
	}
}

// TestEntryStatusCarriesCheckHistory: the loop's status holds each check's state
// (counters, output, recent results), so the page shows no more than the agent
// decided on.
// The command gets 500ms, so that a shell slow to start under load is not killed,
// and the state asserted is waited for.
func TestEntryStatusCarriesCheckHistory(t *testing.T) {
	e := ep("web", "10.0.0.1", 80, 0)
	spec := check.Spec{Kind: check.Exec, Argv: []string{"sh", "-c", "echo broken; exit 3"}, Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond}
	a := start(t, manifestOf(mentry(e, spec)), Options{Publisher: newMemory(t)})
	var cs check.State
	eventually(t, "three failures, the last with the command's output", func() bool {
		st, _ := status(a.a, e.Key())
		if len(st.Checks) != 1 {
			return false
		}
		cs = st.Checks[0].State
		return cs.Failures >= 3 && cs.Output == "exit status 3: broken" && st.Checks[0].LastError == cs.Output &&
			len(cs.History()) >= 3 && !cs.Healthy && !cs.Pending
	})
}

// TestPageConvertsOnlyWhatItShows: a rendering converts the checks (with their
// histories) of the entries it shows, not of every entry: with 2,000 entries and a
// filter that keeps one, three checks an entry cost what they cost with that one
// entry alone.
func TestPageConvertsOnlyWhatItShows(t *testing.T) {
	const shown = 1234
	statuses := func(n, checks int) []EntryStatus {
		out := make([]EntryStatus, 0, n)
		for i := range n {
			if n == 1 {
				i = shown
			}
			st := EntryStatus{Key: ep(fmt.Sprintf("svc%d", i), "10.0.0.1", 80, 0).Key(), Reason: ReasonUnhealthy}
			for j := range checks {
				tr := check.NewTracker(1, 2)
				for k := range 12 {
					tr.Record(time.Now(), k%2 == 0, "status 503, want 2xx")
				}
				st.Checks = append(st.Checks, CheckStatus{Check: fmt.Sprintf("http http://10.0.0.1:80/c%d", j), State: tr.State()})
			}
			out = append(out, st)
		}
		return out
	}
	allocs := func(url string, st []EntryStatus) float64 {
		a := New(manifestOf(), Options{})
		a.statuses = st
		mux := http.NewServeMux()
		ui.New(ui.Options{Source: &inspector{ag: a, ready: func() (bool, string) { return true, "" }}}).Mount(mux)
		req := httptest.NewRequest(http.MethodGet, url, nil)
		return testing.AllocsPerRun(5, func() { mux.ServeHTTP(httptest.NewRecorder(), req) })
	}
	for _, url := range []string{"/ui/fragment?entry=prod/svc1234/", "/ui/state.json?entry=prod/svc1234/"} {
		one := allocs(url, statuses(1, 3)) - allocs(url, statuses(1, 0))
		all := allocs(url, statuses(2000, 3)) - allocs(url, statuses(2000, 0))
		if all > one+50 {
			t.Errorf("GET %s: three checks an entry cost %.0f allocations among 2,000 entries, %.0f with the one shown alone: "+
				"the checks of entries not shown were converted", url, all, one)
		}
	}
}

// TestPageShowsWhyACheckCannotStart: a check the agent cannot build (the manifest
// would have refused it) never has a result; the page shows its error, not "no
// result yet" alone.
func TestPageShowsWhyACheckCannotStart(t *testing.T) {
	e := ep("web", "10.0.0.1", 80, 0)
	bad := check.Spec{Kind: check.HTTP, Interval: time.Second} // no target
	_, want := check.New(bad.WithDefaults())
	if want == nil {
		t.Fatal("check.New accepted a check without a target")
	}
	a := start(t, manifestOf(mentry(e, bad)), Options{Publisher: newMemory(t)})
	in := &inspector{ag: a.a, ready: func() (bool, string) { return true, "" }}
	var c ui.Check
	eventually(t, "the entry on the page", func() bool {
		s := in.State(ui.Query{})
		if len(s.Entries) != 1 || len(s.Entries[0].Checks) != 1 {
			return false
		}
		c = s.Entries[0].Checks[0]
		return true
	})
	if c.Results != 0 || c.Output != want.Error() {
		t.Fatalf("check = %+v, want no result and the output %q", c, want.Error())
	}
}

// TestPageShowsLocalityAndHealth: the page shows each entry's place, the node's when
// the entry names none (and only its own zone when it names one), and a health the
// manifest sets.
func TestPageShowsLocalityAndHealth(t *testing.T) {
	plain := ep("web", "10.0.0.1", 80, 0)
	drained := ep("api", "10.0.0.2", 80, 0)
	drained.Zone, drained.Health = "eu-west-1b", endpoint.Draining
	base := runHTTP(t, Config{Manifest: manifestOf(mentry(plain), mentry(drained)), Registry: newMemory(t),
		Agent: Options{Region: "eu-west", Zone: "eu-west-1a"}})
	s := pageUntil(t, base, "both entries listed", func(s ui.State) bool { return len(s.Entries) == 2 })
	got := map[string]ui.Entry{}
	for _, e := range s.Entries {
		got[e.Service] = e
	}
	if e := got["web"]; e.Region != "eu-west" || e.Zone != "eu-west-1a" || e.Health != "healthy" {
		t.Errorf("web: %q/%q %q; want the node's place, healthy", e.Region, e.Zone, e.Health)
	}
	if e := got["api"]; e.Region != "" || e.Zone != "eu-west-1b" || e.Health != "draining" {
		t.Errorf("api: %q/%q %q; want its own zone and no region (naming a zone, it takes none from the node), draining", e.Region, e.Zone, e.Health)
	}
	if page := get(t, base+"/ui"); !strings.Contains(page, `data-health="draining"`) || !strings.Contains(page, "eu-west / eu-west-1a") {
		t.Error("the page shows neither the draining entry nor the node's place")
	}
}
