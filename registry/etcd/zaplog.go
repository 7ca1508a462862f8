package etcd

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger gives the etcd client (which logs with zap) the registry's slog logger.
// Only warnings and errors are passed on: the client's info logs are per-request
// noise. Its warning for each failed attempt of a request it retries goes to debug:
// the request's own error, which the caller reports, says the same once.
func zapLogger(l *slog.Logger) *zap.Logger {
	return zap.New(slogCore{l: l})
}

// slogCore is a zapcore.Core that writes to a slog.Logger.
type slogCore struct {
	l     *slog.Logger
	attrs []slog.Attr
}

func (c slogCore) Enabled(lvl zapcore.Level) bool {
	return lvl >= zapcore.WarnLevel && c.l.Enabled(context.Background(), slogLevel(lvl))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{l: c.l, attrs: append(slices.Clip(c.attrs), attrs(fields)...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level >= zapcore.WarnLevel && c.l.Enabled(context.Background(), entryLevel(e)) {
		return ce.AddCore(e, c)
	}
	return ce
}

// retryAttempt is the message of the client's retry interceptor for each failed
// attempt.
const retryAttempt = "retrying of unary invoker failed"

// entryLevel is the slog level an entry is logged at.
func entryLevel(e zapcore.Entry) slog.Level {
	if e.Message == retryAttempt {
		return slog.LevelDebug
	}
	return slogLevel(e.Level)
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	all := append(slices.Clip(c.attrs), attrs(fields)...)
	if e.LoggerName != "" {
		all = append(all, slog.String("logger", e.LoggerName))
	}
	c.l.LogAttrs(context.Background(), entryLevel(e), e.Message, all...)
	return nil
}

func (slogCore) Sync() error { return nil }

// attrs renders zap fields with zap's own encoder, so every field type keeps its
// value, and sorts them for stable output.
func attrs(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	out := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		out = append(out, slog.Any(k, v))
	}
	slices.SortFunc(out, func(a, b slog.Attr) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
