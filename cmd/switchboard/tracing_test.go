package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/jaegertest"
)

// otelEnv clears every OTEL_* variable of the test's environment for a child, so
// that only what a test sets decides.
func otelEnv(set ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			env = append(env, k+"=")
		}
	}
	return append(env, set...)
}

const tracedManifest = `entries:
  - cluster: east
    service: web
    protocol: http
    address: 10.0.0.7
    port: 8080
    ttl: 30s
`

// TestTracingJaegerRegistrationToWatcher runs what a user runs, each in a process of
// its own over real sockets, all exporting to a real Jaeger: a registrar, an agent
// that watches (it renders the registry), and an agent that registers one endpoint
// and is then stopped with SIGTERM. The registration is one trace, from the writing
// agent through the registrar to the watching agent, with every span a child of
// the one before it; and the writing agent exports only when its graceful shutdown
// flushes, so the trace is there only if the flush works.
func TestTracingJaegerRegistrationToWatcher(t *testing.T) {
	j := jaegertest.Start(t)
	fast := otelEnv("OTEL_BSP_SCHEDULE_DELAY=20")
	reg := startProc(t, "registrar", fast, "registrar", "--cluster-name", "east", "--registry-backend", "memory",
		"--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0", "--write-batch-interval", "20ms",
		"--otlp-endpoint", j.Endpoint(), "--log-level", "warn")
	m := reg.waitOut(listeningLine)
	grpcAddr, health := m[1], m[2]
	waitRegistrarReady(t, health)

	dir := t.TempDir()
	tmpl := writeFile(t, dir, "web.tmpl", "# rendered\n{{ range registrations \"east\" \"http\" \"web\" \"\" }}{{ hostport .Address .Port }}\n{{ end }}")
	out := filepath.Join(dir, "web.out")
	watchMetrics := "127.0.0.1:" + freePort(t)
	watcher := startProc(t, "watching agent", append(fast, "OTEL_SERVICE_NAME=switchboard-agent-watcher"),
		"agent", "--registry-backend", "registrar", "--registrar-address", grpcAddr, "--registrar-node", "watcher",
		"--render", tmpl+":"+out, "--debounce", "10ms", "--metrics-listen", watchMetrics, "--otlp-endpoint", j.Endpoint())
	watcher.waitReady(watchMetrics)
	waitFile(t, out, func(s string) bool { return strings.HasPrefix(s, "# rendered") })

	// The writer exports nothing until its shutdown flushes: an hour between batches.
	manifest := writeFile(t, dir, "agent.yaml", tracedManifest)
	writeMetrics := "127.0.0.1:" + freePort(t)
	writer := startProc(t, "writing agent", otelEnv("OTEL_BSP_SCHEDULE_DELAY=3600000"),
		"agent", "--manifest", manifest, "--registry-backend", "registrar", "--registrar-address", grpcAddr,
		"--registrar-node", "writer", "--metrics-listen", writeMetrics, "--otlp-endpoint", j.Endpoint())
	waitFile(t, out, func(s string) bool { return strings.Contains(s, "10.0.0.7:8080") })
	// The registration's batch is persisted before the removal is sent: a removal
	// that came within the same batch interval would coalesce with it into one
	// batch, which belongs to the registration's trace only (linked from the
	// removal's).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitSpan(ctx, t, j, "switchboard-registrar", "registrar.backend_apply")
	writer.stop(syscall.SIGTERM)
	waitFile(t, out, func(s string) bool { return !strings.Contains(s, "10.0.0.7:8080") })
	if !strings.Contains(writer.err.String(), "unregistered on shutdown") {
		t.Fatalf("the writing agent did not remove its entry on SIGTERM:\n%s", writer.err)
	}

	for _, reason := range []string{"reconcile", "shutdown"} {
		op := map[string]string{"reconcile": "RegisterEndpoint", "shutdown": "UnregisterEndpoint"}[reason]
		tr := waitTrace(ctx, t, j, reason, func(tr jaegertest.Trace) bool {
			_, missing := registrationSteps(tr, op)
			return missing == ""
		})
		t.Logf("the %s's trace %s:\n%s", op, tr.ID, describe(tr))
		checkRegistrationTrace(t, tr, op)
	}
}

// waitSpan waits until Jaeger holds a span named name of service.
func waitSpan(ctx context.Context, t *testing.T, j *jaegertest.Jaeger, service, name string) {
	t.Helper()
	for ctx.Err() == nil {
		traces, _ := j.Traces(ctx, service, 100)
		for _, tr := range traces {
			if _, ok := tr.Span(service, name); ok {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s span of %s in Jaeger", name, service)
}

// waitTrace waits for the writing agent's trace of the write made for reason
// (agent.apply's switchboard.agent.reason) to hold what done wants, and returns
// it; it fails the test naming what the trace held last.
func waitTrace(ctx context.Context, t *testing.T, j *jaegertest.Jaeger, reason string, done func(jaegertest.Trace) bool) jaegertest.Trace {
	t.Helper()
	var last jaegertest.Trace
	var lastErr error
	for ctx.Err() == nil {
		traces, err := j.Traces(ctx, "switchboard-agent", 100)
		lastErr = err
		for _, tr := range traces {
			root, ok := tr.Span("switchboard-agent", "agent.apply")
			if !ok || root.Tags["switchboard.agent.reason"] != reason || !strings.Contains(root.Tags["switchboard."+map[string]string{"reconcile": "register", "shutdown": "unregister"}[reason]+".keys"], "10.0.0.7:8080") {
				continue
			}
			// The list may hold a trace some of whose spans are still on their
			// way: read it whole.
			if last, err = j.Trace(ctx, tr.ID); err == nil && done(last) {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no complete %s trace in Jaeger (last error %v); the last one held:\n%s", reason, lastErr, describe(last))
	return jaegertest.Trace{}
}

func describe(tr jaegertest.Trace) string {
	var b strings.Builder
	for _, s := range tr.Spans {
		fmt.Fprintf(&b, "  %s %s %s/%s parent %s kind %s\n", s.Service, s.Name, s.TraceID, s.SpanID, s.ParentID, s.Kind)
	}
	return b.String()
}

// traceStep is one span a write's trace must hold: the process (service) that
// records it, its name and kind, and the step its parent is.
type traceStep struct{ service, name, kind, parent string }

// registrationSteps finds the spans of a write's trace, by step, and names the
// first step it lacks ("" when none).
func registrationSteps(tr jaegertest.Trace, op string) (map[string]jaegertest.Span, string) {
	found := map[string]jaegertest.Span{}
	for id, st := range writeSteps(op) {
		ok := false
		for _, c := range tr.Spans {
			if c.Service == st.service && c.Name == st.name && c.Kind == st.kind {
				found[id], ok = c, true
				break
			}
		}
		if !ok {
			return found, fmt.Sprintf("%s span %q of %s", st.kind, st.name, st.service)
		}
	}
	return found, ""
}

// writeSteps are the spans of the trace of a write op (RegisterEndpoint,
// UnregisterEndpoint) from an agent to a watching agent, by step.
func writeSteps(op string) map[string]traceStep {
	rpc := "switchboard.registrar.v1.Registrar/" + op
	return map[string]traceStep{
		"apply":   {"switchboard-agent", "agent.apply", "internal", ""},
		"call":    {"switchboard-agent", rpc, "client", "apply"},
		"serve":   {"switchboard-registrar", rpc, "server", "call"},
		"accept":  {"switchboard-registrar", "registrar.accept", "internal", "serve"},
		"fanout":  {"switchboard-registrar", "registrar.fanout", "producer", "accept"},
		"batch":   {"switchboard-registrar", "registrar.write_batch", "internal", "accept"},
		"backend": {"switchboard-registrar", "registrar.backend_apply", "client", "batch"},
		"watcher": {"switchboard-agent-watcher", "registrar.client.apply_event", "consumer", "fanout"},
	}
}

// checkRegistrationTrace checks one write's trace: each step is in the process it
// belongs to, of the kind it should be, and a child of the step before it.
func checkRegistrationTrace(t *testing.T, tr jaegertest.Trace, op string) {
	t.Helper()
	found, missing := registrationSteps(tr, op)
	if missing != "" {
		t.Fatalf("%s trace has no %s; it holds:\n%s", op, missing, describe(tr))
	}
	for id, st := range writeSteps(op) {
		s := found[id]
		if s.TraceID != tr.ID {
			t.Errorf("%s: trace %s, want %s", st.name, s.TraceID, tr.ID)
		}
		if st.parent == "" {
			if s.ParentID != "" {
				t.Errorf("%s has parent %s; the agent's write is the trace's root", st.name, s.ParentID)
			}
			continue
		}
		if want := found[st.parent]; s.ParentID != want.SpanID {
			t.Errorf("%s (%s) has parent %s, want %s (%s of %s)\n%s", st.name, st.service, s.ParentID, want.SpanID, want.Name, want.Service, describe(tr))
		}
	}
	if w := found["watcher"]; w.Tags["switchboard.node"] != "watcher" || !strings.Contains(w.Tags["switchboard.endpoint.key"], "10.0.0.7:8080") {
		t.Errorf("the watching agent's span names node %q, endpoint %q", w.Tags["switchboard.node"], w.Tags["switchboard.endpoint.key"])
	}
}

// TestTracingOffAddsNoTraceparent: a registrar that does not trace (no flag, no
// OTEL_* variable) puts no trace context on its events, even for a write whose call
// carries one, and installs no stats handler: its answer's metadata is untouched.
func TestTracingOffAddsNoTraceparent(t *testing.T) {
	reg := startProc(t, "registrar", otelEnv(), "registrar", "--cluster-name", "east", "--registry-backend", "memory",
		"--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0", "--log-level", "warn")
	m := reg.waitOut(listeningLine)
	waitRegistrarReady(t, m[2])
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := registrarv1.NewRegistrarClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "probe", AcceptBatches: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Recv(); err != nil || ev.GetType() != registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
		t.Fatalf("first event %v, %v", ev, err)
	}
	wctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	var header metadata.MD
	if _, err := c.RegisterEndpoint(wctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{
		{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.7", Port: 8080},
	}}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetType() == registrarv1.EndpointEvent_PROGRESS {
			continue
		}
		if ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED {
			t.Fatalf("event %v, want the ADDED", ev)
		}
		if ev.GetTraceparent() != "" || len(ev.ProtoReflect().GetUnknown()) != 0 {
			t.Fatalf("an untraced registrar sent traceparent %q (unknown fields %x)", ev.GetTraceparent(), ev.ProtoReflect().GetUnknown())
		}
		break
	}
	if len(header.Get("traceparent")) != 0 {
		t.Fatalf("answer metadata %v", header)
	}
	if strings.Contains(reg.err.String(), "tracing") {
		t.Fatalf("a registrar without tracing logged about it:\n%s", reg.err)
	}
}

// The tracing flags are checked before anything starts, on every command that has
// them: a bad value is a usage error (exit 2) naming the flag.
func TestTracingFlagsAreChecked(t *testing.T) {
	dir := t.TempDir()
	manifest := writeFile(t, dir, "agent.yaml", tracedManifest)
	for _, base := range [][]string{
		{"registrar", "--cluster-name", "east", "--listen", "127.0.0.1:0", "--health-listen", ""},
		{"agent", "--manifest", manifest, "--metrics-listen", ""},
		{"controlplane", "--northbound-listen", "127.0.0.1:0", "--southbound-listen", "127.0.0.1:0", "--metrics-listen", ""},
	} {
		for flag, bad := range map[string]string{"--otlp-endpoint": "grpc://collector:4317", "--trace-sample-ratio": "1.5"} {
			args := append(append([]string(nil), base...), flag, bad)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := runCmd(ctx, args...)
			cancel()
			msg, code := report(err)
			if err == nil || code != 2 || !strings.Contains(msg, flag) {
				t.Errorf("switchboard %s: %v (exit %d), want a usage error naming %s", strings.Join(args, " "), err, code, flag)
			}
		}
	}
}
