package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/browsertest"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The browser tests set the page's fallback refresh to 5 s: within the 1 s they
// allow, only the push path (the event stream, then live.js's fetch) can show a
// change.
const fallback = 5 * time.Second

// TestPageInBrowser: in a real browser the page shows an endpoint within 1 s of
// its registration returning, and drops it within 1 s of its removal, without
// being reloaded; the filter form narrows the list.
func TestPageInBrowser(t *testing.T) {
	tab := browsertest.Browser(t, 1280, 900)
	r := startRegistrar(t, registrar.UIOptions{Refresh: fallback})
	r.register(t, ep("east", "web", "10.0.0.1", 80, "node-1"), ep("east", "api", "10.0.0.2", 81, "node-2"))

	browsertest.Do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(r.base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints tr[data-key="east/api/http/10.0.0.2:81"]`)),
	)
	if title := browsertest.Eval[string](t, tab, "document.title"); title != "Switchboard registrar · east" {
		t.Fatalf("title %q", title)
	}
	// live.js fetches once when its event stream opens (the stream's first
	// message): from then on the stream is up.
	browsertest.Poll(t, tab, "the event stream is up", `document.getElementById("live").textContent.startsWith("live · updated")`, 10*time.Second)
	browsertest.Eval[bool](t, tab, `window.sbMark = "same page"; true`) // gone if the page were reloaded

	const added = `#endpoints tr[data-key="east/web/http/10.0.0.3:80"]`
	e := ep("east", "web", "10.0.0.3", 80, "node-3")
	r.register(t, e)
	in := browsertest.Poll(t, tab, "the endpoint appears within 1 s of its registration", `document.querySelector('`+added+`') !== null`, time.Second)
	r.unregister(t, e)
	out := browsertest.Poll(t, tab, "the endpoint leaves within 1 s of its removal", `document.querySelector('`+added+`') === null`, time.Second)
	t.Logf("in the browser %v after the registration returned, gone %v after the removal", in.Round(time.Millisecond), out.Round(time.Millisecond))
	if mark := browsertest.Eval[string](t, tab, `window.sbMark || ""`); mark != "same page" {
		t.Fatalf("the page was reloaded instead of updated (mark %q)", mark)
	}

	browsertest.Do(t, tab, "filter by service", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS(`#filter input[name="service"]`), "api"),
		chromedp.Click(chromedp.CSS(`#filter button[type="submit"]`)),
	)
	browsertest.Poll(t, tab, "the filter narrows the list",
		`location.search.includes("service=api") && document.querySelector('#endpoints tr[data-service="api"]') !== null &&
		 document.querySelector('#endpoints tr[data-service="web"]') === null && document.querySelector('#services tr[data-service="web"]') === null`,
		10*time.Second)
	if v := browsertest.Eval[string](t, tab, `document.querySelector('#filter input[name="service"]').value`); v != "api" {
		t.Fatalf("the filter form shows %q after the submit", v)
	}
}

// TestLaggingWatcherInBrowser: a watch stream whose client stops reading shows
// its lag on the open page, its row marked, while a reading watcher's does not.
// With SWITCHBOARD_SCREENSHOTS=1 it writes docs/images/registrar-ui.png of that
// page (a few services, three clusters, a lagging watcher) and of an endpoint's
// history.
func TestLaggingWatcherInBrowser(t *testing.T) {
	tab := browsertest.Browser(t, 1280, 900)
	r := startRegistrar(t, registrar.UIOptions{Refresh: fallback})
	r.register(t,
		ep("east", "web", "10.0.0.1", 8080, "node-1"), ep("east", "web", "10.0.0.2", 8080, "node-2"),
		ep("east", "api", "10.0.0.1", 9090, "node-1"), ep("east", "db", "10.0.0.5", 5432, "node-3"))
	peers(t, r, ep("west", "web", "10.1.0.1", 8080, "west-1"), ep("west", "api", "10.1.0.2", 9090, "west-2"),
		ep("north", "web", "10.2.0.1", 8080, "north-1"))
	watch(t, r, &registrarv1.WatchEndpointsRequest{NodeName: "node-1", ClusterName: "east", Services: []string{"web", "api"}})
	stalled(t, r, "node-9")

	browsertest.Do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(r.base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS(`#watchers tr[data-node="node-9"]`)),
	)
	browsertest.Eval[bool](t, tab, `window.sbMark = "same page"; true`)
	// Big updates fill the stalled stream's flow-control windows in a few events.
	for i := range 12 {
		blob := ep("east", "blob", "10.0.0.9", 7000, "node-4")
		blob.Annotations = map[string]string{}
		for j := range 8 {
			blob.Annotations[fmt.Sprintf("chunk-%d", j)] = strings.Repeat(string(rune('a'+i)), 4000)
		}
		r.register(t, blob)
	}
	took := browsertest.Poll(t, tab, "the stalled watcher shows its lag",
		`(function () { var r = document.querySelector('#watchers tr[data-node="node-9"]');
		   return r !== null && r.classList.contains("lag") && parseInt(r.getAttribute("data-lag"), 10) > 0; })()`, 10*time.Second)
	t.Logf("the lagging watcher was marked %v after the last registration", took.Round(time.Millisecond))
	if cls := browsertest.Eval[string](t, tab, `document.querySelector('#watchers tr[data-node="node-1"]').className`); cls != "" {
		t.Fatalf("the reading watcher's row is marked %q", cls)
	}
	if mark := browsertest.Eval[string](t, tab, `window.sbMark || ""`); mark != "same page" {
		t.Fatalf("the page was reloaded instead of updated (mark %q)", mark)
	}
	if os.Getenv("SWITCHBOARD_SCREENSHOTS") == "1" {
		screenshots(t, tab, r)
	}
}

// screenshots writes the page as it is, after an endpoint's updates, and that
// endpoint's history, to docs/images.
func screenshots(t *testing.T, tab context.Context, r *registrarUnderTest) {
	web := ep("east", "web", "10.0.0.1", 8080, "node-1")
	for i, version := range []string{"1.4.2", "1.4.2", "1.5.0"} {
		web.Weight = 10 * (i + 1)
		web.Annotations = map[string]string{"version": version}
		web.Region, web.Zone = "eu-west", "eu-west-1a"
		r.register(t, web)
	}
	browsertest.Poll(t, tab, "the page shows the last update",
		`document.querySelector('#endpoints tr[data-key="east/web/http/10.0.0.1:8080"]').innerText.includes("1 / 30")`, 5*time.Second)
	dir := filepath.Join("..", "..", "docs", "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, tab, filepath.Join(dir, "registrar-ui.png"))
	browsertest.Do(t, tab, "open the endpoint's history", 10*time.Second,
		chromedp.Click(chromedp.CSS(`#endpoints tr[data-key="east/web/http/10.0.0.1:8080"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#events tr[data-type="updated"]`)),
	)
	browsertest.Screenshot(t, tab, filepath.Join(dir, "registrar-ui-history.png"))
}

// peers writes endpoints of other clusters into the backend, as their own
// registrars would; the registrar sees them through the backend's change feed.
func peers(t *testing.T, r *registrarUnderTest, eps ...endpoint.Endpoint) {
	t.Helper()
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Op{Kind: registry.OpRegister, Endpoint: e}
	}
	if err := r.backend.Apply(testCtx(t), ops); err != nil {
		t.Fatal(err)
	}
}

// watch opens a watch stream and reads it until the test ends.
func watch(t *testing.T, r *registrarUnderTest, req *registrarv1.WatchEndpointsRequest) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := r.client.WatchEndpoints(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// stalled opens a watch stream for node on a connection of its own and never
// reads it. Its windows are fixed at 64 KiB: gRPC grows them (BDP estimation)
// only while the client reads.
func stalled(t *testing.T, r *registrarUnderTest, node string) {
	t.Helper()
	conn, err := grpc.NewClient(r.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		conn.Close()
	})
	if _, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: node, ClusterName: "east"}); err != nil {
		t.Fatal(err)
	}
}
