package embedetcd

import (
	"os"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// memberLogger logs a member's errors to stderr. Once the member is being stopped
// its output is dropped: etcd reports every listener it closes as an error, which
// in tests that stop members is noise that buries real failures.
func memberLogger(stopping *atomic.Bool) *zap.Logger {
	core := zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(os.Stderr),
		zapcore.ErrorLevel,
	)
	return zap.New(quietCore{Core: core, stopping: stopping})
}

type quietCore struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (c quietCore) With(fields []zapcore.Field) zapcore.Core {
	return quietCore{Core: c.Core.With(fields), stopping: c.stopping}
}

func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.stopping.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}
