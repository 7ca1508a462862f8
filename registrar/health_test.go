package registrar

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func dial(t *testing.T, ts *testServer) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(ts.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func get(t *testing.T, ts *testServer, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + ts.HealthAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func scrape(t *testing.T, ts *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, ts, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// counterValue sums every series of a counter or gauge scraped from /metrics.
func counterValue(t *testing.T, ts *testServer, name string) float64 {
	t.Helper()
	f := scrape(t, ts)[name]
	if f == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

func TestHealthEndpointsAndMetrics(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	b.failList.Store(true) // no successful sync yet: not ready
	s, err := NewServer(ServerConfig{Registrar: Config{Cluster: "east", Backend: b, SyncInterval: 20 * time.Millisecond},
		Listen: "127.0.0.1:0", HealthListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	ts := &testServer{Server: s}
	eventually(t, "sync errors are counted", func() bool { return counterValue(t, ts, "registrar_sync_errors_total") >= 1 })
	if code, _ := get(t, ts, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d before the first sync, want 200", code)
	}
	if code, body := get(t, ts, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d %q before the first sync, want 503", code, body)
	}
	conn := dial(t, ts)
	if _, err := registrarv1.NewRegistrarClient(conn).ListAllEndpoints(testCtx(t), &registrarv1.ListAllEndpointsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ListAllEndpoints before the first sync = %v, want Unavailable", err)
	}
	hc := healthpb.NewHealthClient(conn)
	if r, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health before ready = %v, %v; want NOT_SERVING", r, err)
	}

	b.failList.Store(false)
	eventually(t, "/readyz turns 200", func() bool { code, _ := get(t, ts, "/readyz"); return code == http.StatusOK })
	eventually(t, "gRPC health turns SERVING", func() bool {
		r, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "switchboard.registrar.v1.Registrar"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})

	// Traffic, so that every series has a sample.
	ts.conn = conn
	ts.client = registrarv1.NewRegistrarClient(conn)
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	register(t, ts, ep("east", "web", "10.0.0.1", 80))
	w.next(t)
	eventually(t, "write persisted", func() bool { return s.Registrar().Pending() == 0 })
	fams := scrape(t, ts)
	for _, name := range []string{
		"registrar_connected_agents", "registrar_endpoint_count", "registrar_sync_duration_seconds",
		"registrar_sync_errors_total", "registrar_write_batch_size", "registrar_write_queue_depth",
		"registrar_event_broadcast_total", "registrar_write_batches_total", "registrar_watcher_resyncs_total",
		"registrar_denied_writes_total",
		// The runtime's: what heap and goroutine stacks the watchers cost.
		"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines", "process_resident_memory_bytes",
	} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if v := fams["registrar_connected_agents"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("registrar_connected_agents = %v, want 1", v)
	}
	if m := fams["registrar_endpoint_count"].GetMetric(); len(m) != 1 || m[0].GetLabel()[0].GetValue() != "east" || m[0].GetGauge().GetValue() != 1 {
		t.Errorf("registrar_endpoint_count = %v, want east=1", m)
	}
	if n := fams["registrar_write_batch_size"].GetMetric()[0].GetHistogram().GetSampleCount(); n < 1 {
		t.Errorf("registrar_write_batch_size has %d samples", n)
	}
	byType := map[string]float64{}
	for _, m := range fams["registrar_event_broadcast_total"].GetMetric() {
		byType[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if byType["ENDPOINT_ADDED"] != 1 || byType["SNAPSHOT_COMPLETE"] != 1 {
		t.Errorf("registrar_event_broadcast_total = %v, want one ADDED and one SNAPSHOT_COMPLETE", byType)
	}

	// Reflection is on.
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.String(), "switchboard.registrar.v1.Registrar") {
		t.Fatalf("reflection lists %v, want the Registrar service", r)
	}
	_ = rc.CloseSend()
}

// /debug/memory is served only when asked for, and reports the heap, the stacks and
// the open watch streams.
func TestDebugMemory(t *testing.T) {
	off := startServer(t, Config{})
	if code, _ := get(t, off, "/debug/memory"); code != http.StatusNotFound {
		t.Fatalf("/debug/memory without DebugMemory = %d, want 404", code)
	}

	ts := startServerWith(t, ServerConfig{DebugMemory: true})
	openWatch(t, ts.client, "").untilComplete(t)
	code, body := get(t, ts, "/debug/memory")
	if code != http.StatusOK {
		t.Fatalf("/debug/memory = %d, want 200", code)
	}
	got := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var name string
		var v int64
		if _, err := fmt.Sscanf(line, "%s %d", &name, &v); err != nil {
			t.Fatalf("/debug/memory line %q: %v", line, err)
		}
		got[name] = v
	}
	if got["heap_inuse_bytes"] <= 0 || got["stack_inuse_bytes"] <= 0 || got["goroutines"] <= 0 || got["watchers"] != 1 {
		t.Fatalf("/debug/memory = %v, want heap, stacks and goroutines in use and 1 watcher", got)
	}
}

// A Kill that comes before Run's gRPC Serve has started (Serve then answers
// grpc.ErrServerStopped) is Kill's doing too, not a listener that failed.
func TestKillBeforeServingEndsRunWithoutError(t *testing.T) {
	b := memory.New()
	defer b.Close()
	s, err := NewServer(ServerConfig{Registrar: Config{Cluster: "east", Backend: b}, Listen: "127.0.0.1:0", HealthListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after an early Kill = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of Kill")
	}
}

// Kill stops the server's gRPC serving itself: Run must not report that as a
// listener that failed under it ("serving stopped").
func TestKillEndsRunWithoutError(t *testing.T) {
	for range 30 {
		ts := startServer(t, Config{})
		ts.Kill()
		select {
		case err := <-ts.done:
			close(ts.done)
			if err != nil {
				t.Fatalf("Run after Kill = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of Kill")
		}
	}
}
