package tracing

import (
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// alwaysUntraced are services no call of which is worth a span: health checks
// and server reflection.
var alwaysUntraced = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// ServerOptions are the options a gRPC server adds to trace the calls it serves,
// continuing the W3C trace context a call carries; nil while tracing is off, so a
// server made while it is off has no stats handler at all. untraced names methods
// ("/pkg.Service/Method") or whole services ("/pkg.Service/") to leave out: the
// long-lived streams (a watch is open for hours; its events carry their own trace
// context). Health checks and reflection are always left out.
func ServerOptions(untraced ...string) []grpc.ServerOption {
	o := current.Load()
	if o == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(handlerOptions(o, untraced)...))}
}

// DialOptions are ServerOptions' counterpart for a client: each call made gets a
// client span, and its W3C trace context goes along in the call's metadata; nil
// while tracing is off.
func DialOptions(untraced ...string) []grpc.DialOption {
	o := current.Load()
	if o == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(handlerOptions(o, untraced)...))}
}

func handlerOptions(o *on, untraced []string) []otelgrpc.Option {
	skip := append(append([]string(nil), alwaysUntraced...), untraced...)
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(o.tp),
		otelgrpc.WithPropagators(o.prop),
		// Switchboard's metrics are Prometheus'; otelgrpc's would go nowhere.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return traced(info.FullMethodName, skip) }),
	}
}

// traced reports whether method is none of skip (methods, or services ending in /).
func traced(method string, skip []string) bool {
	for _, s := range skip {
		if method == s || (strings.HasSuffix(s, "/") && strings.HasPrefix(method, s)) {
			return false
		}
	}
	return true
}
