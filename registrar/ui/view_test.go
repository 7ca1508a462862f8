package ui

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// fleet registers n endpoints over 3 clusters, 7 services and 50 nodes.
func fleet(src *fakeSource, n int) {
	clusters := []string{"east", "west", "north"}
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = ep(clusters[i%3], fmt.Sprintf("svc%d", i%7), fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), 8000+i%5, fmt.Sprintf("node-%d", i%50))
	}
	src.set(eps...)
}

// TestViewFiltersAndCaps: the view shows the first MaxRows matching endpoints
// in the page's order (by cluster, service, address), grouped by cluster, says
// how many more match, counts the services, and each filter selects exactly
// what it names.
func TestViewFiltersAndCaps(t *testing.T) {
	src, c := newFake(1<<20), newClock()
	fleet(src, 1200)
	p := New(Options{Source: src, Now: c.now, MaxRows: 100})
	p.sample()
	p.reload()

	v := p.m.view(filter{}, 100, c.t)
	if v.Total != 1200 || v.Matching != 1200 || v.Endpoints.More != 1100 || len(v.Services.Rows) != 7 {
		t.Fatalf("unfiltered: total %d, matching %d, more %d, %d services", v.Total, v.Matching, v.Endpoints.More, len(v.Services.Rows))
	}
	var shown []endpointRow
	for _, g := range v.Endpoints.Groups {
		if g.Count != 400 {
			t.Errorf("cluster %s counts %d, want 400", g.Cluster, g.Count)
		}
		shown = append(shown, g.Rows...)
	}
	if len(shown) != 100 || len(v.Endpoints.Groups) != 1 || v.Endpoints.Groups[0].Cluster != "east" {
		t.Fatalf("%d rows in %d groups, want the first 100, all of east", len(shown), len(v.Endpoints.Groups))
	}
	// The same first 100 as a sort of everything.
	all, _ := src.Endpoints()
	rows := make([]*row, len(all))
	for i, e := range all {
		rows[i] = newRow(e, c.t)
	}
	slices.SortFunc(rows, func(a, b *row) int {
		if rowLess(a, b) {
			return -1
		}
		return 1
	})
	for i, r := range shown {
		if r.Key != rows[i].ep.Key().String() {
			t.Fatalf("row %d is %s, want %s", i, r.Key, rows[i].ep.Key())
		}
	}

	for _, tc := range []struct {
		f    filter
		want int
	}{
		{filter{Service: "svc3"}, 171},
		{filter{Cluster: "west"}, 400},
		{filter{Node: "node-7"}, 24},
		{filter{Cluster: "west", Node: "node-7"}, 8},
		{filter{Service: "svc3", Cluster: "east", Node: "node-3"}, 2},
		{filter{Service: "nope"}, 0},
	} {
		v := p.m.view(tc.f, 100, c.t)
		got := 0
		for _, g := range v.Endpoints.Groups {
			for _, r := range g.Rows {
				if (tc.f.Service != "" && r.Service != tc.f.Service) || (tc.f.Cluster != "" && r.Cluster != tc.f.Cluster) || (tc.f.Node != "" && r.Node != tc.f.Node) {
					t.Fatalf("%+v shows %s", tc.f, r.Key)
				}
				got++
			}
		}
		if v.Matching != tc.want || got != min(tc.want, 100) {
			t.Fatalf("%+v: %d shown of %d matching, want %d", tc.f, got, v.Matching, tc.want)
		}
	}
}

// TestTopKeepsTheLeast: top keeps the k least items in order, as a sort would.
func TestTopKeepsTheLeast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{0, 1, 5, 100} {
		for _, n := range []int{0, 3, 100, 1000} {
			xs := make([]int, n)
			for i := range xs {
				xs[i] = r.IntN(500)
			}
			tp := newTop(k, func(a, b int) bool { return a < b })
			for _, x := range xs {
				tp.push(x)
			}
			slices.Sort(xs)
			if want := xs[:min(k, n)]; !slices.Equal(tp.sorted(), want) {
				t.Fatalf("k=%d n=%d: %v, want %v", k, n, tp.sorted(), want)
			}
		}
	}
}

// TestStaticPage: the page, fetched as a browser without JavaScript would, holds
// the endpoints' rows, the filter form and the live script's hooks, with the
// shared headers.
func TestStaticPage(t *testing.T) {
	src, c := newFake(100), newClock()
	fleet(src, 10)
	p := New(Options{Source: src, Now: c.now})
	p.sample()
	p.reload()
	code, h, body := serve(t, p, "/ui?service=svc1")
	if code != http.StatusOK {
		t.Fatalf("/ui = %d %s", code, body)
	}
	for _, want := range []string{
		`data-key="west/svc1/http/10.0.0.1:8001"`, `data-key="north/svc1/http/10.0.0.8:8003"`,
		`<form class="filter" id="filter" method="get" action="ui">`, `name="service" value="svc1"`,
		`data-fragment="ui/fragment" data-events="ui/events" data-refresh-ms="5000"`, `<main id="content">`,
		`10 endpoints`, `href="ui/history?cluster=west&amp;service=svc1&amp;protocol=http&amp;address=10.0.0.1&amp;port=8001"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, `data-service="svc2"`) {
		t.Error("the page shows a service the filter leaves out")
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
}

// serve answers one GET on p's routes.
func serve(t *testing.T, p *Page, target string) (int, http.Header, string) {
	t.Helper()
	mux := http.NewServeMux()
	p.Mount(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, rec.Header(), rec.Body.String()
}

// TestFirstViewOfALargeRegistrar: at 100,000 endpoints the first view of /ui
// (the mirror loaded) renders well under a second.
func TestFirstViewOfALargeRegistrar(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100,000-endpoint mirror")
	}
	src := newFake(1)
	fleet(src, 100000)
	src.setStatus(src.status)
	p := New(Options{Source: src})
	start := time.Now()
	p.sample()
	p.reload()
	loaded := time.Since(start)
	start = time.Now()
	code, _, body := serve(t, p, "/ui")
	took := time.Since(start)
	if code != http.StatusOK || !strings.Contains(body, "100000 endpoints") || !strings.Contains(body, "99500 more; narrow the filter") {
		t.Fatalf("/ui = %d, %d bytes", code, len(body))
	}
	start = time.Now()
	serve(t, p, "/ui?service=svc3")
	filtered := time.Since(start)
	t.Logf("100,000 endpoints: mirror loaded in %v, first view %v (%d KiB), filtered by service %v", loaded, took, len(body)>>10, filtered)
	if took > time.Second {
		t.Fatalf("the first view took %v", took)
	}
}

// TestAddressOrder: addresses sort as IPs, IPv4 first, and the row stays in its
// 144-byte size class (most of a large mirror is rows).
func TestAddressOrder(t *testing.T) {
	c := newClock()
	var rows []*row
	for _, a := range []string{"2001:db8::10", "10.0.0.10", "2001:db8::9", "10.0.0.9", "9.255.255.255"} {
		rows = append(rows, newRow(ep("east", "web", a, 80, ""), c.t))
	}
	slices.SortFunc(rows, compareAddr)
	var got []string
	for _, r := range rows {
		got = append(got, r.ep.Address)
	}
	if want := []string{"9.255.255.255", "10.0.0.9", "10.0.0.10", "2001:db8::9", "2001:db8::10"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// 192 since endpoints carry a region, a zone and a health (40 bytes more).
	if n := unsafe.Sizeof(row{}); n > 192 {
		t.Fatalf("a row is %d bytes, past the 192-byte size class", n)
	}
}

// TestRowsRenderAfresh: a row's rendering is reused only while it shows the
// same; a change of the endpoint shows on the next rendering.
func TestRowsRenderAfresh(t *testing.T) {
	src, c := newFake(100), newClock()
	e := ep("east", "web", "10.0.0.1", 80, "node-a")
	src.set(e)
	p := New(Options{Source: src, Now: c.now})
	p.sample()
	p.reload()
	if _, _, body := serve(t, p, "/ui/fragment"); !strings.Contains(body, "<td>node-a</td>") {
		t.Fatalf("first rendering: %s", body)
	}
	e.Node = "node-b"
	src.set(e)
	p.pull()
	_, _, body := serve(t, p, "/ui/fragment")
	if !strings.Contains(body, "<td>node-b</td>") || strings.Contains(body, "node-a") {
		t.Fatalf("after the update: %s", body)
	}
}

// TestLocalityAndHealthShown: each endpoint row shows its region and zone and its
// health, a state other than healthy marked; state.json carries them too.
func TestLocalityAndHealthShown(t *testing.T) {
	src, c := newFake(100), newClock()
	a := ep("east", "web", "10.0.0.1", 80, "n1")
	a.Region, a.Zone = "eu-west-1", "eu-west-1a"
	b := ep("east", "web", "10.0.0.2", 80, "n2")
	b.Zone, b.Health = "eu-west-1b", endpoint.Draining
	src.set(a, b)
	p := New(Options{Source: src, Now: c.now})
	p.sample()
	p.reload()
	_, _, body := serve(t, p, "/ui")
	for _, want := range []string{
		"<td>eu-west-1 / eu-west-1a</td><td>healthy</td>",
		`<td>eu-west-1b</td><td class="lag">draining</td>`,
		`<th>Zone</th><th>Health</th>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	_, _, js := serve(t, p, "/ui/state.json")
	for _, want := range []string{`"zone": "eu-west-1a"`, `"region": "eu-west-1"`, `"health": "draining"`} {
		if !strings.Contains(js, want) {
			t.Errorf("state.json lacks %s", want)
		}
	}
}
