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
