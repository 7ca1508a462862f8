package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/agent/ui"
)

// TestPageReadsWithoutJavaScript: a plain GET of /ui is the whole page, rendered on
// the server: every section, a row per entry with its state and gate, each check
// with its counters, recent results and output; only the page's own assets are
// linked, and the headers keep it to them.
func TestPageReadsWithoutJavaScript(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	p := get(t, base+"/ui")
	if p.code != http.StatusOK || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui = %d %s", p.code, p.header.Get("Content-Type"))
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, want := range []string{
		`<title>Switchboard agent · node-7</title>`,
		`<p id="live" data-fragment="ui/fragment" data-events="ui/events" data-refresh-ms="5000">`,
		`<main id="content">`,
		`<tr data-entry="prod/web/http/10.0.0.1:8080" data-state="published" data-gate="open">`,
		`<tr data-entry="prod/api/grpc/10.0.0.1:9090" data-state="withdrawn" data-gate="closed">`,
		`<tr data-entry="prod/db/tcp/10.0.0.9:5432" data-state="held" data-gate="closed">`,
		`data-check="http http://127.0.0.1:8080/healthz" data-status="passing"`,
		`data-check="exec /usr/local/bin/probe" data-status="failing"`,
		`12 passes in a row; unhealthy after 3 failures`,
		`3 failures in a row; healthy after 1 pass`,
		`<span class="r-fail" title="fail at 10:20:20">✗</span>`,
		`health checks failing`, `pod not Ready`,
		`id="gate-state" data-gate="gate-partly"`, `partly open</span> for 1 of 3 entries`,
		`<tr data-file="/etc/nginx/conf.d/upstream.conf"`,
		`<tr data-xds-node="envoy-1">`, `title="0123456789abcdef0123">0123456789ab…`,
		`<td data-xds-kind="sotw">SotW 3</td>`, `<td data-xds-kind="delta">delta 3</td>`, `2 streams open`,
		`12.5 queries/s</strong> over the last 30s · 1234 answered`,
		`<tr data-connected="true"`, `<td class="mono">1.42</td>`,
		`<span class="dim nowrap">eu-west / eu-west-1a</span>`, `grpc-1<br><span class="dim nowrap">eu-west / eu-west-1b</span>`, `<span class="state-withdrawn" data-health="draining">draining</span>`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// Only relative links: the page needs nothing beyond the agent.
	for _, m := range regexp.MustCompile(`(?:src|href|action)="([^"]*)"`).FindAllStringSubmatch(p.body, -1) {
		if u, err := url.Parse(m[1]); err != nil || u.Host != "" || u.Scheme != "" || strings.HasPrefix(m[1], "/") {
			t.Errorf("the page links %q, not relative to itself", m[1])
		}
	}
	for _, asset := range []string{"/ui/common/style.css", "/ui/common/live.js"} {
		if a := get(t, base+asset); a.code != http.StatusOK || a.body == "" {
			t.Errorf("GET %s = %d", asset, a.code)
		}
	}
}

// TestFragmentIsTheLivePart: /ui/fragment is what replaces #content, not a page.
func TestFragmentIsTheLivePart(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	f := get(t, base+"/ui/fragment")
	if f.code != http.StatusOK || strings.Contains(f.body, "<html") || !strings.Contains(f.body, `id="summary"`) ||
		!strings.Contains(f.body, `data-entry="prod/web/http/10.0.0.1:8080"`) {
		t.Fatalf("GET /ui/fragment = %d:\n%s", f.code, f.body)
	}
}

// TestCheckOutputIsEscaped: a check's output, an entry's name and the filter reach
// the page only through html/template: markup in them is shown, never run.
func TestCheckOutputIsEscaped(t *testing.T) {
	s := sample()
	s.Entries[1].Source = `<img src=x onerror=alert(2)>`
	base := serve(t, ui.Options{Source: &fake{s: s}})
	for _, path := range []string{"/ui", "/ui/fragment", "/ui?entry=" + url.QueryEscape("<b>")} {
		p := get(t, base+path)
		if p.code != http.StatusOK {
			t.Fatalf("GET %s = %d", path, p.code)
		}
		for _, raw := range []string{"<script>alert(1)", "<img src=x", "<b>"} {
			if strings.Contains(p.body, raw) {
				t.Errorf("GET %s: %q appears unescaped", path, raw)
			}
		}
		if path != "/ui?entry=%3Cb%3E" && !strings.Contains(p.body, "exit status 1: &lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the check's output is not shown escaped", path)
		}
	}
	if p := get(t, base+"/ui?entry="+url.QueryEscape("<b>")); !strings.Contains(p.body, "No entry contains “&lt;b&gt;”") {
		t.Errorf("the filter is not shown escaped:\n%s", p.body)
	}
}

// TestFilter: ?entry= keeps the entries whose key or source contains it, ignoring
// case, on the page and in state.json; the summary still counts them all.
func TestFilter(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	p := get(t, base+"/ui?entry=API")
	if strings.Count(p.body, "<tr data-entry=") != 1 || !strings.Contains(p.body, `data-entry="prod/api/grpc/10.0.0.1:9090"`) ||
		!strings.Contains(p.body, "1 of 3 entries contain “API”") || !strings.Contains(p.body, `value="API"`) {
		t.Fatalf("filtered page:\n%s", p.body)
	}
	if p := get(t, base+"/ui?entry=pods"); strings.Count(p.body, "<tr data-entry=") != 1 || !strings.Contains(p.body, `data-entry="prod/db/tcp/10.0.0.9:5432"`) {
		t.Fatalf("filter by source:\n%s", p.body)
	}
	var s ui.State
	if err := json.Unmarshal([]byte(get(t, base+"/ui/state.json?entry=web").body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Entries) != 1 || s.Entries[0].Service != "web" || s.XDS == nil || s.Registrar == nil {
		t.Fatalf("state.json?entry=web = %+v", s)
	}
}

// TestStateJSONFilterMatchingNothing: a filter that matches no entry gives an
// empty list of entries, not null.
func TestStateJSONFilterMatchingNothing(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	body := get(t, base+"/ui/state.json?entry=nomatch").body
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	if got := string(raw["entries"]); got != "[]" {
		t.Fatalf("state.json?entry=nomatch: entries = %s, want []", got)
	}
}

// TestStateJSON: /ui/state.json is the whole State, as JSON.
func TestStateJSON(t *testing.T) {
	want := sample()
	base := serve(t, ui.Options{Source: &fake{s: want}})
	r := get(t, base+"/ui/state.json")
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /ui/state.json = %d %s", r.code, r.header.Get("Content-Type"))
	}
	var got ui.State
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 3 || got.Entries[1].Checks[0].Output != want.Entries[1].Checks[0].Output ||
		len(got.Entries[1].Checks[0].History) != 5 || got.DNS.PerSecond != 12.5 || got.XDS.Clients[0].Types[0].Version != "0123456789abcdef0123" ||
		!got.Generated.Equal(want.Generated) {
		t.Fatalf("state.json = %+v", got)
	}
}

// TestBadQueries: the page takes one parameter, entry; anything else, or an entry
// that is too long, repeated or holds control characters, is answered 400 with a
// short plain-text reason that does not repeat the input.
func TestBadQueries(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	for _, tc := range []struct{ query, reason string }{
		{"foo=1", "unknown query parameter"},
		{"%3Cscript%3Ealert(1)%3C/script%3E=1", "unknown query parameter"},
		{"entry=a&entry=b", "give it once"},
		{"entry=" + strings.Repeat("x", 129), "longer than 128 bytes"},
		{"entry=a%00b", "control characters"},
		{"entry=a%0Ab", "control characters"},
		{"entry=a%1B%5B31m", "control characters"},
		{"entry=a%C2%85", "control characters"},
		{"entry=a%E2%80%A8", "control characters"},
		{"entry=%FF%FE", "not valid UTF-8"},
		{"entry=%zz", "malformed"},
		{"entry=a;b", "malformed"},
		{"entry=" + strings.Repeat("%3C", 400), "too long"},
	} {
		for _, path := range []string{"/ui", "/ui/fragment", "/ui/state.json", "/ui/events", "/ui/"} {
			r := get(t, base+path+"?"+tc.query)
			if r.code != http.StatusBadRequest || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") ||
				!strings.Contains(r.body, tc.reason) {
				t.Errorf("GET %s?%s = %d %s %q, want 400 saying %q", path, tc.query, r.code, r.header.Get("Content-Type"), r.body, tc.reason)
			}
			if strings.Contains(r.body, "<") || len(r.body) > 100 {
				t.Errorf("GET %s?%s: reason %q repeats the input or is not short", path, tc.query, r.body)
			}
		}
	}
	for _, ok := range []string{"", "entry=", "entry=web", "entry=" + strings.Repeat("é", 64), "entry=10.0.0.1%3A8080"} {
		if r := get(t, base+"/ui?"+ok); r.code != http.StatusOK {
			t.Errorf("GET /ui?%s = %d %q", ok, r.code, r.body)
		}
	}
}

// TestTrailingSlash: /ui/ leads to /ui, where the page's relative links resolve.
func TestTrailingSlash(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}})
	c := http.Client{Timeout: wait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/ui/?entry=web")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui?entry=web" {
		t.Fatalf("GET /ui/ = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestEmptyAgent: an agent with nothing to show says so in each section.
func TestEmptyAgent(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: ui.State{Generated: t0, NotReady: "checks: 1 have no result yet"}}})
	p := get(t, base+"/ui")
	for _, want := range []string{
		`data-gate="gate-closed"`, "closed</span>: no entries.", "No entries: give the agent a manifest",
		"None (--render, --prometheus-sd).", "xDS server off", "DNS server off", "No registry backend",
		"not ready: checks: 1 have no result yet",
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the empty page lacks %q", want)
		}
	}
}
