package ui_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/browsertest"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// health is a real HTTP health endpoint whose answer the test flips.
type health struct {
	srv *httptest.Server
	ok  atomic.Bool
}

func newHealth(t *testing.T, ok bool) *health {
	h := &health{}
	h.ok.Store(ok)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !h.ok.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *health) spec(interval time.Duration) check.Spec {
	return check.Spec{Kind: check.HTTP, Target: h.srv.URL, Interval: interval, Timeout: interval, Rise: 1, Fall: 1}.WithDefaults()
}

func entry(service, addr string, port int, checks ...check.Spec) manifest.Entry {
	return manifest.Entry{Endpoint: endpoint.Endpoint{Cluster: "prod", Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1},
		Checks: checks}
}

// runAgent runs a real agent with cfg, its HTTP port on 127.0.0.1, until the test
// ends, and returns the port's base URL.
func runAgent(t *testing.T, cfg agent.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP = ln
	if cfg.Registry == nil {
		r := memory.New()
		t.Cleanup(func() { r.Close() })
		cfg.Registry = r
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(wait):
			t.Error("the agent did not stop")
		}
	})
	return "http://" + ln.Addr().String()
}

// TestPageInBrowser: a real browser opens a real agent's page; when the test turns
// the entry's health endpoint to 500, the open page shows the check failing, the
// gate closed and the entry withdrawn, and when it turns it back, published again,
// without being reloaded. The page's refresh interval is longer than the test
// waits, so only the event stream can bring the changes in time.
func TestPageInBrowser(t *testing.T) {
	tab := browsertest.Browser(t, 1280, 900)
	h := newHealth(t, true)
	base := runAgent(t, agent.Config{
		Manifest: &manifest.Manifest{Entries: []manifest.Entry{entry("web", "10.0.0.1", 8080, h.spec(50*time.Millisecond))}},
		UI:       agent.UIOptions{Refresh: time.Minute},
	})

	const row = `tr[data-entry="prod/web/http/10.0.0.1:8080"]`
	browsertest.Do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	if title := browsertest.Eval[string](t, tab, "document.title"); !strings.HasPrefix(title, "Switchboard agent") {
		t.Fatalf("title %q", title)
	}
	browsertest.Poll(t, tab, "the entry is published", `document.querySelector('`+row+`[data-state="published"][data-gate="open"]') !== null`, 10*time.Second)
	// A mark on the document: gone if the page were reloaded.
	browsertest.Eval[bool](t, tab, `window.sbMark = "same page"; true`)

	h.ok.Store(false)
	took := browsertest.Poll(t, tab, "the check fails, the gate closes, the entry is withdrawn", `(function () {
		var r = document.querySelector('`+row+`[data-state="withdrawn"][data-gate="closed"]');
		return r !== null && r.querySelector('.check[data-status="failing"]') !== null &&
			r.innerText.includes("status 500, want 2xx") && r.innerText.includes("health checks failing") &&
			document.getElementById("gate-state").getAttribute("data-gate") === "gate-closed";
	})()`, 10*time.Second)
	t.Logf("the failure reached the open page in %s", took)

	h.ok.Store(true)
	browsertest.Poll(t, tab, "the check passes again, the entry is published",
		`document.querySelector('`+row+`[data-state="published"][data-gate="open"] .check[data-status="passing"]') !== null`, 10*time.Second)
	if mark := browsertest.Eval[string](t, tab, `window.sbMark || ""`); mark != "same page" {
		t.Fatalf("the page was reloaded instead of updated (mark %q)", mark)
	}
	if live := browsertest.Eval[string](t, tab, `document.getElementById("live").textContent`); !strings.HasPrefix(live, "live") {
		t.Errorf("the live line says %q", live)
	}
}
