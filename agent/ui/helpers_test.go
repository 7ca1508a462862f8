package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/agent/ui"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds anything a test waits on.
const wait = 15 * time.Second

// fake is a Source the test sets.
type fake struct {
	mu      sync.Mutex
	s       ui.State
	changes ui.Changes
}

func (f *fake) State(ui.Query) ui.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *fake) Changes() (uint64, <-chan struct{}) { return f.changes.Version() }

// set replaces the state and bumps the version, as the agent does.
func (f *fake) set(s ui.State) {
	f.mu.Lock()
	f.s = s
	f.mu.Unlock()
	f.changes.Bump()
}

var t0 = time.Date(2025, 3, 4, 10, 20, 30, 0, time.UTC)

// sample is a state with something in every section: a published entry whose
// check passes, a withdrawn one whose check fails with an output that is markup,
// a pod held back, a file, an xDS client, DNS and the registrar.
func sample() ui.State {
	hist := func(oks ...bool) []ui.Result {
		out := make([]ui.Result, len(oks))
		for i, ok := range oks {
			out[i] = ui.Result{At: t0.Add(time.Duration(i-len(oks)) * 5 * time.Second), OK: ok}
		}
		return out
	}
	return ui.State{
		Generated: t0, Node: "node-7", Backend: "registrar", Ready: true,
		Entries: []ui.Entry{
			{Key: "prod/web/http/10.0.0.1:8080", Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1:8080",
				Source: "manifest", State: ui.StatePublished, GateOpen: true, Since: t0.Add(-time.Minute),
				Region: "eu-west", Zone: "eu-west-1a", Health: "draining",
				Checks: []ui.Check{{Name: "http http://127.0.0.1:8080/healthz", Healthy: true, Rise: 2, Fall: 3, Passes: 12,
					Results: 12, Changed: t0.Add(-time.Minute), History: hist(true, true, true, true)}}},
			{Key: "prod/api/grpc/10.0.0.1:9090", Cluster: "prod", Service: "api", Protocol: "grpc", Address: "10.0.0.1:9090",
				Source: "manifest", State: ui.StateWithdrawn, Reason: "health checks failing", Since: t0.Add(-10 * time.Second),
				Checks: []ui.Check{{Name: "exec /usr/local/bin/probe", Rise: 1, Fall: 2, Failures: 3, Results: 20,
					Output: "exit status 1: <script>alert(1)</script>", Changed: t0.Add(-10 * time.Second),
					History: hist(true, true, false, false, false)}}},
			{Key: "prod/db/tcp/10.0.0.9:5432", Cluster: "prod", Service: "db", Protocol: "tcp", Address: "10.0.0.9:5432",
				Source: "pods", State: ui.StateHeld, Reason: "pod not Ready", Checks: []ui.Check{}},
		},
		Files: []ui.File{{Kind: "template", Path: "/etc/nginx/conf.d/upstream.conf", Updated: t0, Written: t0.Add(-time.Hour)}},
		XDS: &ui.XDS{Addr: "127.0.0.1:18000", Clients: []ui.XDSClient{{Node: "envoy-1", Stream: 3, Since: t0.Add(-time.Hour),
			Types: []ui.XDSType{{Type: "Cluster", Wildcard: true, Version: "0123456789abcdef0123"}, {Type: "ClusterLoadAssignment", Names: 2, Version: "fedcba"}}},
			{Node: "grpc-1", Delta: true, Stream: 3, Since: t0.Add(-time.Minute), Types: []ui.XDSType{{Type: "ClusterLoadAssignment", Names: 1}},
				Region: "eu-west", Zone: "eu-west-1b"}}},
		DNS:       &ui.DNS{Addr: "127.0.0.1:8600", Domain: "switchboard.", Queries: 1234, PerSecond: 12.5, OverSeconds: 30},
		Registrar: &ui.Registrar{Target: "127.0.0.1:9443", Channel: "READY", Connected: true, Since: t0.Add(-time.Hour), Version: "1.42"},
	}
}

// serve runs the page over src until the test ends.
func serve(t *testing.T, o ui.Options) string {
	t.Helper()
	mux := http.NewServeMux()
	ui.New(o).Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// fetched is a response, its body read and closed.
type fetched struct {
	code   int
	header http.Header
	body   string
}

func get(t *testing.T, url string) fetched {
	t.Helper()
	c := http.Client{Timeout: wait}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fetched{resp.StatusCode, resp.Header, string(b)}
}
