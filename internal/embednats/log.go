package embednats

import (
	"context"
	"fmt"
	"log/slog"
)

// slogAdapter lets nats-server log through the caller's slog.Logger, so the server's
// output lands in the same structured stream as everything else.
type slogAdapter struct {
	l *slog.Logger
}

func (a slogAdapter) log(level slog.Level, format string, v ...any) {
	if !a.l.Enabled(context.Background(), level) {
		return
	}
	a.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (a slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v...) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v...) }

// Fatalf only logs: nats-server calls it for conditions it then reports as a start
// error, and an embedded server must never exit the process.
func (a slogAdapter) Fatalf(format string, v ...any) { a.log(slog.LevelError, format, v...) }
func (a slogAdapter) Errorf(format string, v ...any) { a.log(slog.LevelError, format, v...) }
func (a slogAdapter) Debugf(format string, v ...any) { a.log(slog.LevelDebug, format, v...) }

// Tracef maps to a level below Debug: protocol traces are only wanted when asked for.
func (a slogAdapter) Tracef(format string, v ...any) { a.log(slog.LevelDebug-4, format, v...) }
