package statuspage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/statuspage"
	"github.com/switchboard-mesh/switchboard/internal/browsertest"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// The browser helpers, named as the tests below use them.
func browser(t *testing.T) context.Context { return browsertest.Browser(t, 0, 0) }

func do(t *testing.T, tab context.Context, what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	browsertest.Do(t, tab, what, d, steps...)
}

func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	return browsertest.Eval[T](t, tab, expr)
}

func poll(t *testing.T, tab context.Context, what, expr string) {
	t.Helper()
	browsertest.Poll(t, tab, what, expr, 10*time.Second)
}

// TestPageInBrowser: a real browser renders the page of a fabric the test started,
// its script keeps it live, and when a node leaves the open page drops it without
// being reloaded.
func TestPageInBrowser(t *testing.T) {
	tab := browser(t)
	base, f := fabric(t, 200*time.Millisecond, "cloud/n1", "edge/n1", "lab/n1")
	waitState(t, base, func(s statuspage.Snapshot) bool {
		return len(s.Groups) == 3 && s.Links.ByState["applied"] == 2
	})

	do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(base+"/status"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="lab/n1"]`)),
	)
	if title := eval[string](t, tab, "document.title"); title != "Switchboard control plane" {
		t.Fatalf("title %q", title)
	}
	if n := eval[int](t, tab, `document.querySelectorAll('#links tr[data-state="applied"]').length`); n != 2 {
		t.Fatalf("the page shows %d applied links, want 2", n)
	}
	// A mark on the document: gone if the page were reloaded.
	eval[bool](t, tab, `window.sbMark = "same page"; true`)
	poll(t, tab, "the script updates the page", `document.getElementById("live").textContent.startsWith("live · updated")`)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Node("lab/n1").Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	poll(t, tab, "the departed node leaves the page",
		`document.querySelector('tr[data-node="lab/n1"]') === null && document.querySelectorAll('#links tr[data-state="applied"]').length === 1`)
	if mark := eval[string](t, tab, `window.sbMark || ""`); mark != "same page" {
		t.Fatalf("the page was reloaded instead of updated (mark %q)", mark)
	}
	if n := eval[int](t, tab, `document.querySelectorAll('tr[data-node="edge/n1"], tr[data-node="cloud/n1"]').length`); n != 2 {
		t.Fatalf("after the departure the page shows %d of the remaining nodes, want 2", n)
	}
}

// TestSegmentsInBrowser: the open page lists the segments, a link to a group without
// nodes marked "no nodes yet"; when a node of that group registers, the page shows
// the pair as active without being reloaded.
func TestSegmentsInBrowser(t *testing.T) {
	tab := browser(t)
	srv := controlPlane(t, "database:\n  type: in_memory\n", server.Options{StatusRefresh: 200 * time.Millisecond})
	base := "http://" + srv.MetricsAddr()
	f := startNodes(t, srv, "cloud/n1", "edge/n1")
	addSegmentLinks(t, srv, "default", "cloud", "edge", "cloud", "customer-a")
	waitState(t, base, applied)

	const waiting = `#segments tr[data-segment="default"][data-pair="cloud customer-a"]`
	do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(base+"/status"),
		chromedp.WaitVisible(chromedp.CSS(waiting)),
	)
	if text := eval[string](t, tab, `document.querySelector('`+waiting+`').innerText`); !strings.Contains(text, "no nodes yet") {
		t.Fatalf("the waiting link's row reads %q, want it to say no nodes yet", text)
	}
	if n := eval[int](t, tab, `document.querySelectorAll('#segments tr[data-pair="cloud edge"].ok').length`); n != 1 {
		t.Fatalf("the page shows %d active cloud-edge pairs, want 1", n)
	}
	eval[bool](t, tab, `window.sbMark = "same page"; true`)

	if _, err := f.Start(cpharness.NodeConfig{Group: "customer-a", ID: "n1", Target: srv.SouthboundAddr()}); err != nil {
		t.Fatal(err)
	}
	poll(t, tab, "the pair becomes active once customer-a has a node",
		`(function () { var r = document.querySelector('`+waiting+`'); return r !== null && r.className === "ok" && !r.innerText.includes("no nodes yet"); })()`)
	if mark := eval[string](t, tab, `window.sbMark || ""`); mark != "same page" {
		t.Fatalf("the page was reloaded instead of updated (mark %q)", mark)
	}
}
