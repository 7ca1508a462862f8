package etcd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// The etcd client's warnings reach the registry's slog logger with their fields;
// its info chatter does not.
func TestZapLoggerForwardsWarnings(t *testing.T) {
	var buf bytes.Buffer
	lg := zapLogger(slog.New(slog.NewTextHandler(&buf, nil))).Named("etcd-client").With(zap.String("endpoint", "e1"))
	lg.Info("chatter")
	lg.Warn("retrying", zap.Int("attempt", 3), zap.Error(errors.New("boom")))
	out := buf.String()
	if strings.Contains(out, "chatter") {
		t.Errorf("info message forwarded: %s", out)
	}
	for _, want := range []string{"level=WARN", "msg=retrying", "attempt=3", "error=boom", "endpoint=e1", "logger=etcd-client"} {
		if !strings.Contains(out, want) {
			t.Errorf("forwarded warning %q lacks %q", out, want)
		}
	}
}

// The client's warning for each failed attempt of a request it retries says nothing
// the request's own error does not: it goes to debug, not to a user's terminal.
func TestZapLoggerQuietsRetryAttempts(t *testing.T) {
	var info, debug bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&info, nil), slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})} {
		lg := zapLogger(slog.New(h))
		lg.Warn("retrying of unary invoker failed", zap.String("method", "/etcdserverpb.KV/Range"), zap.Int("attempt", 0))
	}
	if info.Len() != 0 {
		t.Errorf("a retried attempt is logged at info level: %s", info.String())
	}
	if out := debug.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "method=/etcdserverpb.KV/Range") {
		t.Errorf("a retried attempt at debug level: %q, want it at DEBUG with its fields", out)
	}
}
