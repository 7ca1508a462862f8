package jaegertest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/freeport"
	"github.com/switchboard-mesh/switchboard/internal/toolbin"
)

// readyTimeout bounds the wait for Jaeger to answer; it is ready in about a second
// on an idle machine.
const readyTimeout = 60 * time.Second

// Jaeger is a running Jaeger all-in-one with memory storage. It is stopped when the
// test that started it ends.
type Jaeger struct {
	// OTLP is the host:port of its OTLP/gRPC receiver, in plaintext.
	OTLP string
	// QueryURL is the base URL of its query API (http://127.0.0.1:PORT).
	QueryURL string

	proc *toolbin.Process
}

// Endpoint is the OTLP endpoint to give an exporter (--otlp-endpoint,
// OTEL_EXPORTER_OTLP_ENDPOINT): a plaintext URL.
func (j *Jaeger) Endpoint() string { return "http://" + j.OTLP }

// Start runs Jaeger for the test and waits until it takes spans and answers
// queries; it skips the test when no binary is available (see Binary) and fails it
// if Jaeger does not come up within readyTimeout.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Binary(t)
	var err error
	for range startAttempts {
		var j *Jaeger
		j, err = startOnce(t, bin)
		if err == nil {
			return j
		}
		if j == nil || !j.proc.AddrInUse() {
			break
		}
	}
	t.Fatalf("jaegertest: %v", err)
	return nil
}

// startAttempts retries when a free port found for Jaeger is taken before it binds
// it, which another process on the machine can do.
const startAttempts = 3

// startOnce starts the process and waits for readiness; on failure it has already
// stopped the process, the error carries the end of its log, and the Jaeger (nil if
// the process never started) tells Start whether to retry.
func startOnce(t testing.TB, bin string) (*Jaeger, error) {
	ports, err := freeport.On("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(config(ports[0], ports[1], ports[2])), 0o644); err != nil {
		return nil, err
	}
	proc, err := toolbin.StartProcess(toolbin.Command{
		Bin:          bin,
		Args:         []string{"--config", cfg},
		Dir:          dir,
		LogPath:      filepath.Join(dir, "jaeger.log"),
		LogTailLines: 40,
	})
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		OTLP:     net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		QueryURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		proc:     proc,
	}
	start := time.Now()
	if err := j.waitReady(); err != nil {
		proc.Stop()
		return j, fmt.Errorf("jaeger not ready: %w\n--- jaeger log (tail) ---\n%s", err, proc.LogTail())
	}
	t.Logf("jaegertest: jaeger %s ready in %s: OTLP/gRPC %s, query %s", Version, time.Since(start).Round(time.Millisecond), j.OTLP, j.QueryURL)
	t.Cleanup(proc.Stop)
	return j, nil
}

// config is the all-in-one's default configuration (cmd/jaeger/internal/
// all-in-one.yaml of v1.75.0) cut down to what the tests use, each listener on its
// own loopback port: the OTLP/gRPC receiver, memory storage, and the query
// extension (its HTTP API; its gRPC API must listen somewhere too). No Jaeger,
// Zipkin or OTLP/HTTP receivers, no sampling, health, expvar, zpages or metrics
// endpoints: nothing else binds a port. The batch processor flushes at once, so a
// span is queryable as soon as it is received.
func config(otlp, queryHTTP, queryGRPC int) string {
	return fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: warn

extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%[2]d
    grpc:
      endpoint: 127.0.0.1:%[3]d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d

processors:
  batch:
    timeout: 1ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, otlp, queryHTTP, queryGRPC)
}

// waitReady waits until the query API answers and the OTLP receiver accepts
// connections.
func (j *Jaeger) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		if j.proc.Exited() {
			return fmt.Errorf("jaeger exited")
		}
		last = j.probe(client)
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %s: %w", readyTimeout, last)
}

func (j *Jaeger) probe(client *http.Client) error {
	resp, err := client.Get(j.QueryURL + "/api/services")
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("query API: %s", resp.Status)
	}
	c, err := net.DialTimeout("tcp", j.OTLP, 2*time.Second)
	if err != nil {
		return fmt.Errorf("OTLP receiver: %w", err)
	}
	return c.Close()
}

// Stop kills Jaeger now (Start's cleanup does it at the end of the test).
func (j *Jaeger) Stop() { j.proc.Stop() }

// Pid is the Jaeger process's id.
func (j *Jaeger) Pid() int { return j.proc.Pid() }

// ctxOrTimeout is ctx, bounded to a query's worth of time when it has no deadline.
func ctxOrTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 30*time.Second)
}
