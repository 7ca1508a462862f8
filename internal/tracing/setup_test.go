package tracing

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// collector is an OTLP/gRPC trace receiver that keeps what it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string
	mu   sync.Mutex
	got  []*tracepb.ResourceSpans
	md   metadata.MD // of the last export
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: ln.Addr().String()}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return c
}

func (c *collector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	c.md = md
	c.got = append(c.got, req.GetResourceSpans()...)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// spans returns the names of the spans received and the resource attributes of the
// last batch.
func (c *collector) spans() (names []string, resource map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resource = map[string]string{}
	for _, rs := range c.got {
		for _, a := range rs.GetResource().GetAttributes() {
			resource[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				names = append(names, s.GetName())
			}
		}
	}
	return names, resource
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Off unless an endpoint is given by flag or environment; OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none win over both.
func TestOn(t *testing.T) {
	for _, c := range []struct {
		o    Options
		env  map[string]string
		want bool
	}{
		{Options{}, nil, false},
		{Options{Endpoint: "http://127.0.0.1:4317"}, nil, true},
		{Options{}, map[string]string{EnvEndpoint: "http://c:4317"}, true},
		{Options{}, map[string]string{EnvTracesEndpoint: "http://c:4317"}, true},
		{Options{Endpoint: "http://127.0.0.1:4317"}, map[string]string{EnvSDKDisabled: "true"}, false},
		{Options{Endpoint: "http://127.0.0.1:4317"}, map[string]string{EnvSDKDisabled: "TRUE"}, false},
		{Options{Endpoint: "http://127.0.0.1:4317"}, map[string]string{EnvSDKDisabled: "false"}, true},
		{Options{}, map[string]string{EnvEndpoint: "http://c:4317", EnvTracesExporter: "none"}, false},
	} {
		c.o.Getenv = env(c.env)
		if got, why := c.o.On(); got != c.want {
			t.Errorf("%+v with %v: on %v (%s), want %v", c.o, c.env, got, why, c.want)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	for s, ok := range map[string]bool{
		"": true, "127.0.0.1:4317": true, "collector:4317": true, "[::1]:4317": true,
		"http://127.0.0.1:4317": true, "https://collector.example:4317": true,
		"127.0.0.1": false, "grpc://c:4317": false, "http://": false, "c:": false,
	} {
		if err := CheckEndpoint(s); (err == nil) != ok {
			t.Errorf("CheckEndpoint(%q) = %v, want ok %v", s, err, ok)
		}
	}
}

// Setup with nothing asking for tracing turns nothing on.
func TestSetupOff(t *testing.T) {
	shutdown, err := Setup(context.Background(), Options{Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if Enabled() || ServerOptions() != nil || DialOptions() != nil {
		t.Fatal("tracing is on without an endpoint")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Setup exports to the endpoint given, names the service as given unless the
// environment says otherwise, and shutdown flushes what is queued and turns
// tracing off.
func TestSetupExportsAndShutdownFlushes(t *testing.T) {
	c := newCollector(t)
	vars := map[string]string{
		"OTEL_SERVICE_NAME":        "from-env",
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
	}
	t.Setenv("OTEL_SERVICE_NAME", vars["OTEL_SERVICE_NAME"])
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", vars["OTEL_RESOURCE_ATTRIBUTES"])
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000") // only shutdown sends
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t1")
	shutdown, err := Setup(context.Background(), Options{Endpoint: "http://" + c.addr, ServiceName: "switchboard-test", ServiceVersion: "v9"})
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() || len(ServerOptions()) != 1 || len(DialOptions()) != 1 {
		t.Fatal("tracing is off after Setup with an endpoint")
	}
	_, span := NewTracer("test").Start(context.Background(), "a span")
	span.End()
	if names, _ := c.spans(); len(names) != 0 {
		t.Fatalf("exported before the batch was due: %v", names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Fatal("tracing still on after shutdown")
	}
	names, res := c.spans()
	if strings.Join(names, ",") != "a span" {
		t.Fatalf("collector received %v, want the one span", names)
	}
	c.mu.Lock()
	tenant := c.md.Get("x-tenant")
	c.mu.Unlock()
	if len(tenant) != 1 || tenant[0] != "t1" {
		t.Fatalf("the export carried x-tenant %q, want OTEL_EXPORTER_OTLP_HEADERS' t1", tenant)
	}
	if res["service.name"] != "from-env" || res["service.version"] != "v9" || res["deployment.environment"] != "test" {
		t.Fatalf("resource %v: want service.name from OTEL_SERVICE_NAME, version v9, the attributes of OTEL_RESOURCE_ATTRIBUTES", res)
	}
}

// A ratio of 0 records no new trace, and the OTEL_TRACES_SAMPLER given instead
// is honoured when the flag is not.
func TestSampling(t *testing.T) {
	for _, c := range []struct {
		name   string
		o      Options
		env    string
		record bool
	}{
		{"ratio 0", Options{SampleRatio: 0, SampleRatioSet: true}, "", false},
		{"ratio 1", Options{SampleRatio: 1, SampleRatioSet: true}, "", true},
		{"environment always_off", Options{}, "always_off", false},
		{"flag over environment", Options{SampleRatio: 1, SampleRatioSet: true}, "always_off", true},
		{"default", Options{}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvSampler, c.env)
			c.o.Endpoint = "http://127.0.0.1:1"
			shutdown, err := Setup(context.Background(), c.o)
			if err != nil {
				t.Fatal(err)
			}
			_, span := NewTracer("test").Start(context.Background(), "x")
			if span.IsRecording() != c.record {
				t.Errorf("recording %v, want %v", span.IsRecording(), c.record)
			}
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = shutdown(ctx) // nothing listens: the flush fails, which is fine here
		})
	}
}

func TestSetupRefusesBadFlags(t *testing.T) {
	for _, o := range []Options{
		{Endpoint: "grpc://x:1"},
		{Endpoint: "http://x:1", SampleRatio: 2, SampleRatioSet: true},
	} {
		o.Getenv = env(nil)
		if _, err := Setup(context.Background(), o); err == nil || Enabled() {
			t.Errorf("Setup(%+v) = %v, on %v; want an error and tracing off", o, err, Enabled())
		}
	}
}
