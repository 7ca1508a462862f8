package ui_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// registrarUnderTest is a registrar of cluster "east" on the memory backend,
// its page on, and a gRPC client as agents have.
type registrarUnderTest struct {
	srv     *registrar.Server
	base    string // the health port's URL
	client  registrarv1.RegistrarClient
	backend registry.Registry
	stop    func() // stops the server and waits for Run (idempotent)
}

func startRegistrar(t *testing.T, o registrar.UIOptions) *registrarUnderTest {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	srv, err := registrar.NewServer(registrar.ServerConfig{
		Registrar: registrar.Config{Cluster: "east", Backend: b},
		Listen:    "127.0.0.1:0", HealthListen: "127.0.0.1:0", UI: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the registrar did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	select {
	case <-srv.Registrar().Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("registrar not ready within 10s")
	}
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &registrarUnderTest{srv: srv, base: "http://" + srv.HealthAddr().String(), client: registrarv1.NewRegistrarClient(conn), backend: b, stop: stop}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ep(cluster, service, addr string, port int, node string) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: addr, Port: port, Node: node, Priority: 1, Weight: 10}
}

func protos(eps []endpoint.Endpoint) []*registryv1.Endpoint {
	out := make([]*registryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e.ToProto()
	}
	return out
}

// register registers eps through the registrar, as an agent does.
func (r *registrarUnderTest) register(t *testing.T, eps ...endpoint.Endpoint) {
	t.Helper()
	if _, err := r.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps)}); err != nil {
		t.Fatal(err)
	}
}

func (r *registrarUnderTest) unregister(t *testing.T, eps ...endpoint.Endpoint) {
	t.Helper()
	if _, err := r.client.UnregisterEndpoint(testCtx(t), &registrarv1.UnregisterEndpointRequest{Endpoints: protos(eps)}); err != nil {
		t.Fatal(err)
	}
}

// get fetches path whole.
func (r *registrarUnderTest) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, r.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// within polls cond every 10 ms for up to d and returns how long it took.
func within(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestPageWithoutJavaScript: plain GETs of /ui, as a browser without JavaScript
// makes them, show an endpoint soon after its registration returned and not
// after its removal; its history page lists both changes.
func TestPageWithoutJavaScript(t *testing.T) {
	r := startRegistrar(t, registrar.UIOptions{})
	// Once a first endpoint is on the page, the page follows changes: one made
	// before its first read of the registrar would be in that read, with no
	// "added" in its history.
	first := ep("east", "first", "10.0.0.9", 8080, "node-1")
	r.register(t, first)
	within(t, "a first endpoint appears", 5*time.Second, func() bool {
		_, body := r.get(t, "/ui")
		return strings.Contains(body, `data-key="east/first/http/10.0.0.9:8080"`)
	})
	e := ep("east", "web", "10.0.0.1", 8080, "node-1")
	const row = `data-key="east/web/http/10.0.0.1:8080"`
	r.register(t, e)
	took := within(t, "the endpoint appears", 2*time.Second, func() bool { _, body := r.get(t, "/ui"); return strings.Contains(body, row) })
	t.Logf("the endpoint was on the page %v after its registration returned", took.Round(time.Millisecond))
	r.unregister(t, e)
	within(t, "the endpoint leaves", 2*time.Second, func() bool { _, body := r.get(t, "/ui"); return !strings.Contains(body, row) })

	code, body := r.get(t, "/ui/history?cluster=east&service=web&protocol=http&address=10.0.0.1&port=8080")
	if code != http.StatusOK || !strings.Contains(body, `data-type="added"`) || !strings.Contains(body, `data-type="removed"`) ||
		!strings.Contains(body, "does not hold this endpoint now") {
		t.Fatalf("history page = %d:\n%s", code, body)
	}
}

// events opens /ui/events and returns its lines, as they come.
func events(t *testing.T, ctx context.Context, url string) (*http.Response, <-chan string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return resp, lines
}

// nextData waits up to d for the stream's next message.
func nextData(t *testing.T, lines <-chan string, d time.Duration) (string, bool) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", false
			}
			if strings.HasPrefix(l, "data: ") {
				return l, true
			}
		case <-timeout:
			t.Fatalf("no event within %v", d)
		}
	}
}

// TestEventsFollowRegistrations: the event stream sends a message at once, then
// one after a registration; it ends when the registrar shuts down, which does
// not wait for it.
func TestEventsFollowRegistrations(t *testing.T) {
	// No status samples once the page is ready: only the change applied wakes
	// the stream.
	r := startRegistrar(t, registrar.UIOptions{StatusEvery: time.Hour})
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, body := r.get(t, "/ui/state.json"); strings.Contains(body, `"ready": true`) || strings.Contains(body, `"ready":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the page not ready within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, lines := events(t, testCtx(t), r.base+"/ui/events?service=web")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/ui/events = %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	first, _ := nextData(t, lines, 5*time.Second)
	start := time.Now()
	r.register(t, ep("east", "web", "10.0.0.1", 80, ""))
	second, _ := nextData(t, lines, 2*time.Second)
	if second == first {
		t.Fatalf("the message after a registration is %q again", second)
	}
	t.Logf("event %v after the registration returned", time.Since(start).Round(time.Millisecond))
	if _, body := r.get(t, "/ui/fragment?service=web"); !strings.Contains(body, "10.0.0.1") {
		t.Fatalf("the fragment after the event lacks the new endpoint: %s", body)
	}

	start = time.Now()
	r.stop()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v with an event stream open", took)
	}
	timeout := time.After(2 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-lines:
		case <-timeout:
			t.Fatal("the event stream did not end within 2s of the shutdown")
		}
	}
}

// TestEventStreamsAreBounded: past MaxViewers open streams, a new one is
// refused with 503 (the page then polls); a slot frees when a viewer leaves.
func TestEventStreamsAreBounded(t *testing.T) {
	r := startRegistrar(t, registrar.UIOptions{MaxViewers: 1})
	ctx, cancel := context.WithCancel(testCtx(t))
	resp, lines := events(t, ctx, r.base+"/ui/events")
	nextData(t, lines, 5*time.Second)
	code, body := r.get(t, "/ui/events")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("a second stream = %d %q, want 503", code, body)
	}
	cancel()
	resp.Body.Close()
	within(t, "the slot frees", 5*time.Second, func() bool {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		resp, _ := events(t, ctx, r.base+"/ui/events")
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestStateJSON: /ui/state.json serves the view for tools.
func TestStateJSON(t *testing.T) {
	r := startRegistrar(t, registrar.UIOptions{})
	r.register(t, ep("east", "web", "10.0.0.1", 80, "n1"), ep("east", "api", "10.0.0.2", 80, "n1"))
	within(t, "both endpoints", 2*time.Second, func() bool {
		_, body := r.get(t, "/ui/state.json?service=web")
		return strings.Contains(body, `"total": 2`) && strings.Contains(body, `"matching": 1`)
	})
	// The backend's state comes with the next status sample (every 500 ms).
	within(t, "the backend's state", 3*time.Second, func() bool {
		_, body := r.get(t, "/ui/state.json")
		for _, want := range []string{`"cluster": "east"`, `"kind": "memory"`, `"key": "east/web/http/10.0.0.1:80"`, `"mode": "native watch`} {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return true
	})
}

// TestEscapingThroughTheRegistrar: names cannot hold markup (they are
// [a-zA-Z][a-zA-Z0-9_-]*), but a node name and annotation values can, and the
// registrar accepts them; every page shows them escaped only, and a filter value
// with markup too.
func TestEscapingThroughTheRegistrar(t *testing.T) {
	const evil = "<script>alert(1)</script>"
	r := startRegistrar(t, registrar.UIOptions{})
	e := ep("east", "web", "10.0.0.1", 80, evil)
	e.Annotations = map[string]string{"note": evil, "quote": `"><img src=x onerror=alert(1)>`}
	r.register(t, e)
	within(t, "the endpoint appears", 2*time.Second, func() bool {
		_, body := r.get(t, "/ui/fragment")
		return strings.Contains(body, `data-key="east/web/http/10.0.0.1:80"`)
	})
	for _, path := range []string{"/ui", "/ui/fragment", "/ui/state.json", "/ui?node=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
		"/ui/history?cluster=east&service=web&protocol=http&address=10.0.0.1&port=80"} {
		code, body := r.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("%s = %d", path, code)
		}
		if strings.Contains(body, evil) || strings.Contains(body, "<img") {
			t.Errorf("%s holds markup of the input unescaped", path)
		}
	}
}
