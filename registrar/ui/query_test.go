package ui

import (
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
)

// TestBadQueriesAre400: every route checks its query string: unknown names,
// repeated names, values too long, with control characters or not UTF-8,
// malformed encoding, and for the history a missing or malformed key field, are
// answered 400 with a short plain-text reason that never repeats the value.
func TestBadQueriesAre400(t *testing.T) {
	src, c := newFake(100), newClock()
	fleet(src, 3)
	p := New(Options{Source: src, Now: c.now})
	p.sample()
	p.reload()
	long := strings.Repeat("a", maxValue+1)
	key := "cluster=east&service=svc0&protocol=http&address=10.0.0.0&port=8000"
	for _, tc := range []struct {
		target, reason, secret string
	}{
		{"/ui?bogus=<script>", "unknown parameter", "<script>"},
		{"/ui?<script>=1", "unknown parameter", "<script>"},
		{"/ui/fragment?service=a&service=b", "service: given more than once", ""},
		{"/ui?service=" + long, "service: longer than 253 bytes", long},
		{"/ui/state.json?node=a%0Ab", "node: contains control characters", "a\nb"},
		{"/ui/events?cluster=%C2%85x", "cluster: contains control characters", "\u0085x"},
		{"/ui?node=%ff%fe", "node: not valid UTF-8", "\xff\xfe"},
		{"/ui?service=%zz", "malformed query string", "%zz"},
		{"/ui?service=a;b", "malformed query string", "a;b"},
		{"/ui?service=" + strings.Repeat("x", maxQuery), "query string longer than", "xxxxxxxxxx"},
		{"/ui/history?cluster=east", "service is required", ""},
		{"/ui/history?" + key + "&node=x", "unknown parameter", ""},
		{"/ui/history?" + strings.Replace(key, "port=8000", "port=65536", 1), "port: not a number from 0 to 65535", "65536"},
		{"/ui/history?" + strings.Replace(key, "port=8000", "port=-1", 1), "port: not a number", ""},
		{"/ui/history?" + strings.Replace(key, "port=8000", "port=%2B80", 1), "port: not a number", "+80"},
		{"/ui/history?" + strings.Replace(key, "port=8000", "port=80x", 1), "port: not a number", "80x"},
		{"/ui/history?" + strings.Replace(key, "address=10.0.0.0", "address=fe80::1%25eth0", 1), "address: not an IP address", "eth0"},
		{"/ui/history?" + strings.Replace(key, "service=svc0", "service=%3Cscript%3Ealert(1)%3C/script%3E", 1), "service: not a valid name", "<script>"},
	} {
		code, h, body := serve(t, p, tc.target)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.reason) {
			t.Errorf("%.80s = %d %q, want 400 %q", tc.target, code, body, tc.reason)
		}
		if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%.80s: Content-Type %q", tc.target, ct)
		}
		if tc.secret != "" && strings.Contains(body, tc.secret) {
			t.Errorf("%.80s: the reason repeats the input: %q", tc.target, body)
		}
		if len(body) > 200 {
			t.Errorf("%.80s: a %d-byte reason", tc.target, len(body))
		}
	}
	for _, ok := range []string{"/ui", "/ui?service=&cluster=&node=", "/ui/fragment?node=" + url.QueryEscape("<script>alert(1)</script>"), "/ui/history?" + key} {
		if code, _, body := serve(t, p, ok); code != http.StatusOK {
			t.Errorf("%s = %d %q", ok, code, body)
		}
	}
}

// TestEscaping: a filter value and an endpoint's node and annotations (the free
// text a registration may carry) reach the page only escaped.
func TestEscaping(t *testing.T) {
	const evil = "<script>alert(1)</script>"
	src, c := newFake(100), newClock()
	e := ep("east", "web", "10.0.0.1", 80, evil)
	e.Annotations = map[string]string{"note": evil, "x": `"><img src=x onerror=alert(1)>`}
	src.set(e)
	p := New(Options{Source: src, Now: c.now})
	p.sample()
	p.reload()
	e.Weight = 3
	src.set(e)
	p.pull()
	p.sample()
	hist := "/ui/history?cluster=east&service=web&protocol=http&address=10.0.0.1&port=80"
	for _, target := range []string{"/ui", "/ui/fragment", "/ui?node=" + url.QueryEscape(evil), "/ui/state.json", hist} {
		code, _, body := serve(t, p, target)
		if code != http.StatusOK {
			t.Fatalf("%s = %d", target, code)
		}
		for _, raw := range []string{evil, "<img"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s holds %q unescaped", target, raw)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") && !strings.Contains(body, `\u003cscript\u003ealert(1)\u003c/script\u003e`) {
			t.Errorf("%s does not show the node at all", target)
		}
	}
	if _, _, body := serve(t, p, hist); strings.Count(body, `data-type="`) != 1 || !strings.Contains(body, "note=&lt;script&gt;") {
		t.Errorf("history page: %s", body)
	}
}

// TestImportsStayLean: the page imports neither gRPC nor the registrar beyond
// package registrar/inspect (see the package comment).
func TestImportsStayLean(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/switchboard-mesh/switchboard/"
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "google.golang.org/grpc"),
			strings.HasPrefix(dep, module+"registrar") && dep != module+"registrar/inspect" && dep != module+"registrar/ui":
			t.Errorf("registrar/ui depends on %s", dep)
		}
	}
}
