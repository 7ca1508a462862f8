package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/statuspage"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fabric runs a control plane (star topology, cloud the hub) with the status page
// refreshing every refresh, and starts nodes in it. It returns the HTTP base URL.
func fabric(t *testing.T, refresh time.Duration, nodes ...string) (string, *cpharness.Fabric) {
	t.Helper()
	srv := controlPlane(t, "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n", server.Options{StatusRefresh: refresh})
	return "http://" + srv.MetricsAddr(), startNodes(t, srv, nodes...)
}

// controlPlane runs a control plane on the config file body, with o's other options,
// until the test ends.
func controlPlane(t *testing.T, body string, o server.Options) *server.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Northbound.Endpoint, cfg.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Reconciler.BaseRetryDelay = 10 * time.Millisecond
	o.Config, o.MetricsListen = cfg, "127.0.0.1:0"
	srv, err := server.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("control plane: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("control plane did not stop")
		}
	})
	return srv
}

// startNodes starts data-plane nodes ("group/id") on srv; they stop before it does.
func startNodes(t *testing.T, srv *server.Server, nodes ...string) *cpharness.Fabric {
	t.Helper()
	f := cpharness.NewFabric()
	t.Cleanup(f.Close)
	for _, id := range nodes {
		g, n, _ := strings.Cut(id, "/")
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: n, Target: srv.SouthboundAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// page is a fetched response, its body read and closed.
type page struct {
	StatusCode int
	Header     http.Header
}

func fetch(t *testing.T, url string) (page, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{StatusCode: resp.StatusCode, Header: resp.Header}, string(body)
}

// waitState polls state.json until ok accepts it.
func waitState(t *testing.T, base string, ok func(statuspage.Snapshot) bool) statuspage.Snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := fetch(t, base+"/status/state.json")
		var s statuspage.Snapshot
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatalf("state.json: %v\n%s", err, body)
		}
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("state never as wanted; last:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func applied(s statuspage.Snapshot) bool {
	return len(s.Groups) == 2 && s.Links.ByState["applied"] == 1 && s.Links.Total == 1
}

// TestServedOverHTTP: the page, its live fragment, the JSON and the assets are
// served on the metrics port, with headers that keep the page to its own assets.
func TestServedOverHTTP(t *testing.T) {
	base, _ := fabric(t, time.Second, "cloud/n1", "edge/n1")
	s := waitState(t, base, applied)
	if s.Mode != "config" || s.Groups[0].Name != "cloud" || !s.Groups[0].Nodes[0].Gateway || !s.Groups[1].Nodes[0].Connected {
		t.Fatalf("snapshot = %+v", s)
	}
	resp, html := fetch(t, base+"/status")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("/status: %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{`<tr data-node="cloud/n1" class="ok">`, `<tr data-node="edge/n1" class="ok">`,
		`data-state="applied"`, `<script src="status/assets/app.js" defer></script>`, "config mode · 2 groups · 1 links"} {
		if !strings.Contains(html, want) {
			t.Errorf("/status lacks %s", want)
		}
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "http://") || strings.Contains(html, "https://") {
		t.Error("/status has an inline script or loads something from elsewhere")
	}
	_, frag := fetch(t, base+"/status/fragment")
	if !strings.Contains(frag, `data-node="edge/n1"`) || strings.Contains(frag, "<html") {
		t.Errorf("/status/fragment:\n%s", frag)
	}
	for _, asset := range []string{"/status/assets/app.js", "/status/common/style.css"} {
		if resp, body := fetch(t, base+asset); resp.StatusCode != http.StatusOK || len(body) < 100 {
			t.Errorf("%s: %d, %d bytes", asset, resp.StatusCode, len(body))
		}
	}
	if resp, _ := fetch(t, base+"/status/templates/page.tmpl"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page's template is served: %d", resp.StatusCode)
	}
}

// TestEscapesWhatNodesSay: a link's status message comes from a data-plane node, so
// it is escaped, never markup; errors recorded show up in the errors table.
func TestEscapesWhatNodesSay(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	if err := st.SaveNode(ctx, store.Node{ID: "edge/n1", Group: "edge", Connected: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateLink(ctx, store.Link{ID: "l1", SourceNodeID: "edge/n1", SourceGroup: "edge", DestGroup: "cloud", Status: store.LinkPending}); err != nil {
		t.Fatal(err)
	}
	connecting, failed, msg := store.LinkConnecting, store.LinkFailed, `<img src=x onerror=alert(1)>`
	if _, err := st.UpdateLink(ctx, "l1", store.LinkUpdate{Status: &connecting}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateLink(ctx, "l1", store.LinkUpdate{Status: &failed, StatusMessage: &msg}); err != nil {
		t.Fatal(err)
	}
	errs := statuspage.NewErrorLog(10)
	errs.Record("route", "edge/n1", errors.New(`<b>subscribe</b> failed`))
	mux := http.NewServeMux()
	statuspage.New(statuspage.Options{Store: st, Mode: "api", Errors: errs}).Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, page := fetch(t, srv.URL+"/status")
	if strings.Contains(page, "<img") || strings.Contains(page, "<b>subscribe") {
		t.Fatalf("markup from a node reached the page:\n%s", page)
	}
	for _, want := range []string{"&lt;img src=x onerror=alert(1)&gt;", "&lt;b&gt;subscribe&lt;/b&gt; failed", `class="badge state-failed" data-count="failed">failed 1`, "cloud (unclaimed)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// segmentRows is the part of state.json about segments, decoded on its own so this
// test reads whatever the page serves.
type segmentRows struct {
	Segments struct {
		Total   int `json:"total"`
		Pending int `json:"pending"`
		Rows    []struct {
			Segment string   `json:"segment"`
			GroupA  string   `json:"groupA"`
			GroupB  string   `json:"groupB"`
			Pending bool     `json:"pending"`
			Waiting []string `json:"waiting"`
		} `json:"rows"`
	} `json:"segments"`
}

// TestSegmentsOnThePage: in API mode the page lists every segment with the group
// pairs it links; a link to a group that has no node yet is listed as waiting for
// one ("no nodes yet") until a node of that group registers; an empty segment says
// it links nothing.
func TestSegmentsOnThePage(t *testing.T) {
	srv := controlPlane(t, "database:\n  type: in_memory\n", server.Options{StatusRefresh: time.Second})
	base := "http://" + srv.MetricsAddr()
	f := startNodes(t, srv, "cloud/n1", "edge/n1")
	addSegmentLinks(t, srv, "default", "cloud", "edge", "cloud", "customer-a")
	addSegmentLinks(t, srv, "tenants")
	waitState(t, base, applied)

	_, html := fetch(t, base+"/status")
	for _, want := range []string{
		`<section id="segments">`,
		`<tr data-segment="default" data-pair="cloud customer-a" class="pending">`,
		`no nodes yet in customer-a`,
		`<tr data-segment="default" data-pair="cloud edge" class="ok">`,
		`<tr data-segment="tenants" data-pair="" class="empty">`,
		"2 segments · 2 group pairs, 1 waiting for nodes",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("/status lacks %s", want)
		}
	}
	var got segmentRows
	_, body := fetch(t, base+"/status/state.json")
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Segments; s.Total != 2 || s.Pending != 1 || len(s.Rows) != 3 || !s.Rows[0].Pending ||
		s.Rows[0].GroupB != "customer-a" || len(s.Rows[0].Waiting) != 1 || s.Rows[0].Waiting[0] != "customer-a" {
		t.Fatalf("state.json segments = %+v", s)
	}

	if _, err := f.Start(cpharness.NodeConfig{Group: "customer-a", ID: "n1", Target: srv.SouthboundAddr()}); err != nil {
		t.Fatal(err)
	}
	waitState(t, base, func(s statuspage.Snapshot) bool { return len(s.Groups) == 3 })
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, html = fetch(t, base+"/status")
		if strings.Contains(html, `<tr data-segment="default" data-pair="cloud customer-a" class="ok">`) && !strings.Contains(html, "no nodes yet") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("customer-a has a node and the page still shows its link waiting:\n%s", html)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// addSegmentLinks makes the segment and links each pair of groups in it (API mode),
// and hands the outcome to the reconcilers as the northbound API does.
func addSegmentLinks(t *testing.T, srv *server.Server, segment string, pairs ...string) {
	t.Helper()
	ctx := context.Background()
	if segment != "default" { // made by its first link
		res, err := srv.Service().AddSegment(ctx, segment)
		if err != nil {
			t.Fatal(err)
		}
		srv.Enqueue(res)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		res, err := srv.Service().AddSegmentLink(ctx, segment, pairs[i], pairs[i+1])
		if err != nil {
			t.Fatal(err)
		}
		srv.Enqueue(res)
	}
}

// TestSegmentsOfTheConfigFile: in config mode the page lists the segments of the
// topology it is given, resolved over the groups with nodes, pairs waiting for a
// node included; without it, it says where the segments are set.
func TestSegmentsOfTheConfigFile(t *testing.T) {
	cfg, err := config.Parse([]byte("topology:\n  segments:\n    - name: main\n      links:\n" +
		"        - group: cloud\n          neighbors: [edge, lab]\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	ctx := context.Background()
	for _, id := range []string{"cloud/n1", "edge/n1"} {
		g, _, _ := strings.Cut(id, "/")
		if err := st.SaveNode(ctx, store.Node{ID: id, Group: g, Connected: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		topology *config.Topology
		want     []string
	}{
		{cfg.Topology, []string{`<tr data-segment="main" data-pair="cloud lab" class="pending">`, "no nodes yet in lab",
			`<tr data-segment="main" data-pair="cloud edge" class="ok">`, "1 segments · 2 group pairs, 1 waiting for nodes"}},
		{nil, []string{"Set in the config file's topology section"}},
	} {
		mux := http.NewServeMux()
		statuspage.New(statuspage.Options{Store: st, Mode: "config", Topology: c.topology}).Mount(mux)
		srv := httptest.NewServer(mux)
		_, page := fetch(t, srv.URL+"/status")
		srv.Close()
		for _, want := range c.want {
			if !strings.Contains(page, want) {
				t.Errorf("with topology %v the page lacks %s", c.topology != nil, want)
			}
		}
	}
}
