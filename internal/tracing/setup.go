package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The standard environment variables Setup reads itself; the exporter, the batch
// span processor, the sampler and the resource read the rest of OTEL_* (headers,
// certificates, OTEL_BSP_*, OTEL_TRACES_SAMPLER_ARG, ...).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvSampler        = "OTEL_TRACES_SAMPLER"
)

// Options are what a command's flags say about tracing (cmd/switchboard,
// --otlp-endpoint and --trace-sample-ratio).
type Options struct {
	// Endpoint is the OTLP/gRPC receiver spans are exported to: a URL
	// (http://collector:4317 in plaintext, https://collector:4317 over TLS) or
	// host:port (TLS unless OTEL_EXPORTER_OTLP_INSECURE=true, as the OTLP exporter
	// takes it). Set, it turns tracing on and wins over the environment; empty,
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT turn it on.
	Endpoint string
	// SampleRatio, when SampleRatioSet, is the fraction of new traces recorded
	// (parentbased_traceidratio: a span with a parent follows the parent's
	// decision). Unset, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide, and
	// without them every trace is recorded (parentbased_always_on).
	SampleRatio    float64
	SampleRatioSet bool
	// ServiceName and ServiceVersion are the resource's service.name and
	// service.version unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
	// otherwise.
	ServiceName, ServiceVersion string
	// Logger receives what Setup decided and, at most one a minute, export errors;
	// nil discards them.
	Logger *slog.Logger
	// Getenv reads the environment; nil is os.Getenv. For tests.
	Getenv func(string) string
}

func (o Options) getenv(k string) string {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.Getenv(k)
}

// On reports whether Setup with o turns tracing on, and if not, why.
func (o Options) On() (bool, string) {
	switch {
	case strings.EqualFold(strings.TrimSpace(o.getenv(EnvSDKDisabled)), "true"):
		return false, EnvSDKDisabled + "=true"
	case strings.TrimSpace(o.getenv(EnvTracesExporter)) == "none":
		return false, EnvTracesExporter + "=none"
	case o.Endpoint != "" || o.getenv(EnvEndpoint) != "" || o.getenv(EnvTracesEndpoint) != "":
		return true, ""
	}
	return false, "no --otlp-endpoint, " + EnvTracesEndpoint + " or " + EnvEndpoint
}

// CheckEndpoint reports what is wrong with an --otlp-endpoint value: it must be
// host:port or an http or https URL with a host.
func CheckEndpoint(s string) error {
	if s == "" {
		return nil
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			return fmt.Errorf("%q: %v", s, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("%q: want an http:// (plaintext) or https:// URL, or host:port", s)
		case u.Host == "":
			return fmt.Errorf("%q: no host", s)
		}
		return nil
	}
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		return fmt.Errorf("%q: want host:port, or an http:// (plaintext) or https:// URL", s)
	}
	return nil
}

// CheckSampleRatio reports a ratio outside [0, 1].
func CheckSampleRatio(r float64) error {
	if r < 0 || r > 1 || math.IsNaN(r) {
		return fmt.Errorf("%v: want a fraction from 0 to 1", r)
	}
	return nil
}

// Setup turns tracing on when o or the environment asks for it (Options.On): it
// builds the OTLP/gRPC exporter, a batch span processor, the sampler and the
// resource, makes them this process's tracing and OpenTelemetry's global provider
// and propagator (W3C trace context and baggage). The returned shutdown turns
// tracing off and flushes the spans still queued, within ctx; call it once the
// command has stopped (a SIGTERM's graceful shutdown). When tracing stays off,
// shutdown does nothing.
func Setup(ctx context.Context, o Options) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	on, why := o.On()
	if !on {
		log.Debug("tracing off", "why", why)
		return nothing, nil
	}
	if err := CheckEndpoint(o.Endpoint); err != nil {
		return nothing, fmt.Errorf("--otlp-endpoint %w", err)
	}
	if o.SampleRatioSet {
		if err := CheckSampleRatio(o.SampleRatio); err != nil {
			return nothing, fmt.Errorf("--trace-sample-ratio %w", err)
		}
	}
	if e := strings.TrimSpace(o.getenv(EnvTracesExporter)); e != "" && e != "otlp" {
		log.Warn("tracing: only the otlp exporter is supported; "+EnvTracesExporter+" ignored", "value", e)
	}
	exp, target, err := newExporter(ctx, o)
	if err != nil {
		return nothing, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := newResource(ctx, o)
	if err != nil {
		// A partial resource (say a malformed OTEL_RESOURCE_ATTRIBUTES) still
		// names the service: trace with it, and say what was wrong.
		log.Warn("tracing: resource attributes", "err", err)
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	sampler := "environment (" + EnvSampler + "), default parentbased_always_on"
	if o.SampleRatioSet {
		popts = append(popts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))))
		sampler = fmt.Sprintf("parentbased_traceidratio %v", o.SampleRatio)
	}
	tp := sdktrace.NewTracerProvider(popts...)
	otel.SetErrorHandler(&limitedLog{log: log, every: time.Minute})
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	restore := Use(tp)
	log.Info("tracing on: exporting spans over OTLP/gRPC", "endpoint", target, "sampler", sampler)
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			restore()
			if err = tp.Shutdown(ctx); err != nil {
				err = fmt.Errorf("tracing: flushing spans: %w", err)
			}
		})
		return err
	}, nil
}

// newExporter is OpenTelemetry's OTLP/gRPC exporter. It reads OTEL_EXPORTER_OTLP_*
// itself (headers, certificates, timeout, compression, and whether a bare host:port
// is plaintext: OTEL_EXPORTER_OTLP_INSECURE); --otlp-endpoint wins over the
// endpoint variables. An http:// URL is plaintext, https:// TLS. It returns the
// endpoint for the log.
func newExporter(ctx context.Context, o Options) (*otlptrace.Exporter, string, error) {
	target := firstSet(o.Endpoint, o.getenv(EnvTracesEndpoint), o.getenv(EnvEndpoint))
	if err := CheckEndpoint(target); err != nil {
		return nil, "", fmt.Errorf("endpoint %w", err)
	}
	var opts []otlptracegrpc.Option
	switch {
	case o.Endpoint == "":
	case strings.Contains(o.Endpoint, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(o.Endpoint))
	default:
		opts = append(opts, otlptracegrpc.WithEndpoint(o.Endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	return exp, target, err
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// newResource describes this process: the service name and version given, which
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override, the SDK and the host.
func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	if o.ServiceName != "" {
		attrs = append(attrs, attribute.String("service.name", o.ServiceName))
	}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	// Later detectors win: the environment over the defaults.
	return resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
}

// limitedLog logs OpenTelemetry's errors (a collector that cannot be reached fails
// every export) at most once every period, with the number left out.
type limitedLog struct {
	log     *slog.Logger
	every   time.Duration
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *limitedLog) Handle(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	args := []any{"err", err}
	if dropped > 0 {
		args = append(args, "errors_since_last", dropped)
	}
	l.log.Warn("tracing: exporting spans failed", args...)
}
