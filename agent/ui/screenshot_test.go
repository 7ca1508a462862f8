package ui_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/browsertest"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// screenshotsEnv makes TestScreenshot write docs/images/agent-ui.png.
const screenshotsEnv = "SWITCHBOARD_SCREENSHOTS"

// TestScreenshot writes the picture of the page that docs/agent.md shows: a real
// agent behind a real registrar, with a passing entry, one whose check has turned
// to failing, a pod held back, a rendered template and a file_sd file, an xDS
// client and DNS queries.
func TestScreenshot(t *testing.T) {
	if os.Getenv(screenshotsEnv) != "1" {
		t.Skipf("set %s=1 to write docs/images/agent-ui.png", screenshotsEnv)
	}
	tab := browsertest.Browser(t, 1280, 900)
	reg := startRegistrar(t, endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 8080, Node: "node-8", Priority: 1},
		endpoint.Endpoint{Cluster: "prod", Service: "node", Protocol: "prometheus", Address: "10.0.0.2", Port: 9100, Node: "node-8", Priority: 1})
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	h := newHealth(t, true)
	probe := check.Spec{Kind: check.Exec, Interval: 300 * time.Millisecond, Rise: 2, Fall: 2,
		Argv: []string{"sh", "-c", `if [ -e "$0" ]; then echo "upstream db 10.0.0.5:5432: connection refused" >&2; exit 2; fi`, broken}}.WithDefaults()
	tcp := check.Spec{Kind: check.TCP, Target: h.srv.Listener.Addr().String(), Interval: 300 * time.Millisecond}.WithDefaults()
	m := &manifest.Manifest{Entries: []manifest.Entry{
		entry("web", "10.0.0.1", 8080, h.spec(300*time.Millisecond), tcp),
		entry("api", "10.0.0.1", 9090, probe),
	}}
	xdsServer, dnsServer := discoveryServers(t)
	base := runAgent(t, agent.Config{
		Manifest: m, Registry: reg, Sources: []agent.NewSource{pods},
		Outputs: fileOutputs(t, dir),
		Servers: []agent.Server{xdsServer, dnsServer},
		Agent:   agent.Options{Region: "eu-west", Zone: "eu-west-1a"},
	})

	browsertest.Do(t, tab, "open the page", 20*time.Second,
		chromedp.Navigate(base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-entry="prod/api/http/10.0.0.1:9090"][data-state="published"]`)),
	)
	time.Sleep(time.Second) // a few passes in the history first
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	watchClusters(t, xdsServer.Addr().String())
	askDNS(t, dnsServer.Addr(), 40)
	browsertest.Poll(t, tab, "the api entry is withdrawn, the xDS client and the DNS rate shown", `(function () {
		var q = document.querySelector("[data-qps]");
		return document.querySelector('tr[data-entry="prod/api/http/10.0.0.1:9090"][data-state="withdrawn"]') !== null &&
			document.querySelector('tr[data-xds-node="envoy-edge-1"]') !== null && q !== null && q.innerText.includes("queries/s");
	})()`, 20*time.Second)
	time.Sleep(time.Second) // more failures in the history
	browsertest.Do(t, tab, "show the latest", 10*time.Second, chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-entry="prod/api/http/10.0.0.1:9090"]`)))
	out := filepath.Join("..", "..", "docs", "images", "agent-ui.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, tab, out)
	t.Logf("wrote %s", out)
}

// startRegistrar runs a registrar over a memory backend holding eps, serves it on
// 127.0.0.1 and returns a registrar client connected to it, as the agent's registry.
func startRegistrar(t *testing.T, eps ...endpoint.Endpoint) registry.Registry {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, e := range eps {
		if err := b.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := registrar.New(registrar.Config{Cluster: "prod", Backend: b, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(wait):
		t.Fatal("registrar not ready")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(registrar.ServerOptions(nil, nil)...)
	r.RegisterService(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	c, err := client.New(client.Options{Addresses: []string{ln.Addr().String()}, Node: "node-7", Cluster: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pods is a source that holds one pod back, as the node's pods source does while
// a pod is not Ready.
func pods(a *agent.Agent, _ prometheus.Registerer) (agent.Source, error) {
	return podSource{a}, nil
}

type podSource struct{ a *agent.Agent }

func (p podSource) Run(ctx context.Context) error {
	e := entry("checkout", "10.244.1.17", 8443)
	e.Held = "pod not Ready"
	p.a.SetSource("pods", []manifest.Entry{e})
	<-ctx.Done()
	return nil
}

func (podSource) Ready() (bool, string) { return true, "" }

func fileOutputs(t *testing.T, dir string) []agent.Output {
	t.Helper()
	tmpl := filepath.Join(dir, "upstream.tmpl")
	body := "upstream web {\n{{- range registrations \"prod\" \"http\" \"web\" \"*\"}}\n  server {{hostport .Address .Port}};\n{{- end}}\n}\n"
	if err := os.WriteFile(tmpl, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := render.NewOutput(render.Spec{Template: tmpl, Out: filepath.Join(dir, "nginx", "upstream.conf")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nginx"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []agent.Output{out, &filesd.Output{Path: filepath.Join(dir, "targets.json")}}
}

func discoveryServers(t *testing.T) (*xds.Server, *dns.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, tl, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := dns.New(pc, tl, dns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return xds.New(ln, xds.Options{}), d
}

// watchClusters opens an Envoy-like ADS stream that asks for every cluster and one
// load assignment, and keeps it open until the test ends.
func watchClusters(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "envoy-edge-1", UserAgentName: "envoy"}
	for _, req := range []*discoveryv3.DiscoveryRequest{
		{Node: node, TypeUrl: resource.ClusterType},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{"web|http"}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
}

// askDNS sends n questions to the DNS server.
func askDNS(t *testing.T, addr string, n int) {
	t.Helper()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for range n / 2 { // A and AAAA each
		if _, err := r.LookupHost(ctx, "web.prod.switchboard"); err != nil {
			t.Fatal(err)
		}
	}
}
