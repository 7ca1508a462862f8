package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/buildinfo"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// tracingFlags are the OpenTelemetry flags of every long-running command that
// speaks gRPC (agent, registrar, controlplane), registered and read here only
// (docs/operations.md, "Tracing"). Tracing is off unless --otlp-endpoint or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// turn it on; OTEL_SDK_DISABLED=true keeps it off.
type tracingFlags struct {
	endpoint string
	ratio    float64
	cmd      *cobra.Command
}

// tracingFlushTimeout bounds the flush of the spans still queued at shutdown.
const tracingFlushTimeout = 5 * time.Second

func addTracingFlags(cmd *cobra.Command) *tracingFlags {
	f := &tracingFlags{cmd: cmd}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoint, "otlp-endpoint", "",
		"export OpenTelemetry traces over OTLP/gRPC to this collector: http://HOST:PORT in plaintext, https://HOST:PORT or HOST:PORT over TLS "+
			"(off by default; OTEL_EXPORTER_OTLP_ENDPOINT also turns it on, OTEL_SDK_DISABLED=true off)")
	fl.Float64Var(&f.ratio, "trace-sample-ratio", 1,
		"with tracing on, the fraction of new traces recorded; a call that carries a trace follows its caller's decision (unset: OTEL_TRACES_SAMPLER, else every trace)")
	return f
}

// validate reports a bad flag value as a usage error, before anything starts.
func (f *tracingFlags) validate() error {
	if err := tracing.CheckEndpoint(f.endpoint); err != nil {
		return usagef("--otlp-endpoint %v", err)
	}
	if err := tracing.CheckSampleRatio(f.ratio); err != nil {
		return usagef("--trace-sample-ratio %v", err)
	}
	return nil
}

// start turns tracing on for this process when the flags or the environment ask
// for it, naming the service (OTEL_SERVICE_NAME overrides). It must run before the
// command makes its gRPC servers and clients, which take their tracing options as
// they are made. stop flushes the queued spans and turns tracing off: defer it, so
// that it runs after the command's graceful shutdown.
func (f *tracingFlags) start(ctx context.Context, log *slog.Logger, service string) (stop func(), err error) {
	if err := f.validate(); err != nil {
		return func() {}, err
	}
	shutdown, err := tracing.Setup(ctx, tracing.Options{
		Endpoint: f.endpoint, SampleRatio: f.ratio, SampleRatioSet: f.cmd.Flags().Changed("trace-sample-ratio"),
		ServiceName: service, ServiceVersion: buildinfo.String(), Logger: log,
	})
	if err != nil {
		return func() {}, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed at shutdown", "err", err)
		}
	}, nil
}
