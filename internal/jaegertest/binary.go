package jaegertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Version is the Jaeger release tools/jaeger/go.mod pins. It names the cached
// binary, so changing the pin must change it too (TestToolsModulePinsVersion checks
// that).
const Version = "v1.75.0"

// Environment variables that opt in to the real Jaeger.
const (
	// EnvBinary names a prebuilt jaeger binary to use instead of building one.
	EnvBinary = "SWITCHBOARD_JAEGER_BIN"
	// EnvAllowBuild set to 1 allows building (and then reusing) the cached binary.
	EnvAllowBuild = "SWITCHBOARD_JAEGER"
)

// toolsModule is where the Jaeger module lives, relative to the main module's root.
const toolsModule = "tools/jaeger"

// Bounds on the build. A cold build compiles about 2,300 packages, several minutes
// on a busy 2-core machine, so the limit leaves room for a slower one; when the test
// has its own deadline the build stops a little before it, to fail with a clear
// message instead of a panic.
const (
	buildTimeout  = 30 * time.Minute
	deadlineSlack = 30 * time.Second
	progressEvery = 30 * time.Second
)

// buildMu stops two tests of one binary from both waiting on the file lock and then
// logging the same build twice.
var buildMu sync.Mutex

// Binary returns the path of a jaeger binary, building it if allowed, and skips the
// test when neither EnvBinary nor EnvAllowBuild is set.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		return givenBinary(t, p)
	}
	if os.Getenv(EnvAllowBuild) != "1" {
		t.Skipf("needs a real Jaeger: set %s=1 to build it (minutes, once) or %s=/path/to/jaeger; `make test-jaeger` does the first",
			EnvAllowBuild, EnvBinary)
	}
	path, err := cachedPath()
	if err != nil {
		t.Fatalf("jaegertest: %v", err)
	}
	if isFile(path) {
		return path
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	ctx, cancel := buildContext(t)
	defer cancel()
	if err := buildLocked(ctx, t, path); err != nil {
		t.Fatalf("jaegertest: build jaeger: %v", err)
	}
	return path
}

// givenBinary checks an explicitly named binary: a wrong path is a configuration
// mistake to report, not a reason to skip.
func givenBinary(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil || !isFile(abs) {
		t.Fatalf("jaegertest: %s=%s: not a file", EnvBinary, p)
	}
	return abs
}

// cachedPath is the per-user cache location of the built binary. os.UserCacheDir
// honours XDG_CACHE_HOME.
func cachedPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("user cache dir: %w", err)
	}
	return filepath.Join(dir, "switchboard", "jaeger-"+Version), nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// buildContext bounds the build by buildTimeout and, if sooner, the test's deadline.
func buildContext(t testing.TB) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(buildTimeout)
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := tt.Deadline(); ok && d.Add(-deadlineSlack).Before(deadline) {
			deadline = d.Add(-deadlineSlack)
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}

// buildLocked builds path unless another process did while this one waited for the
// lock, so that parallel test binaries build once.
func buildLocked(ctx context.Context, t testing.TB, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, path+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if isFile(path) {
		return nil
	}
	return build(ctx, t, path)
}

// build compiles into a private directory beside path and renames the result into
// place, so no reader ever sees a half-written binary.
func build(ctx context.Context, t testing.TB, path string) error {
	mod, err := findToolsModule()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := filepath.Join(tmp, "jaeger")
	t.Logf("jaegertest: building jaeger %s into %s (takes minutes the first time)", Version, path)
	start := time.Now()
	if err := goBuild(ctx, t, mod, out); err != nil {
		return err
	}
	t.Logf("jaegertest: built jaeger in %s", time.Since(start).Round(time.Second))
	return os.Rename(out, path)
}

// goBuild runs `go build -v` in the tools module, logging how many packages it has
// compiled every progressEvery so a long build does not look hung.
func goBuild(ctx context.Context, t testing.TB, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-v", "-o", out, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = dir
	// Jaeger's releases are statically linked; that also spares the build a C
	// toolchain.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var done atomic.Int64
	tail := make(chan string, 1)
	go func() { tail <- countLines(stderr, &done) }()
	stop := logProgress(t, &done)
	last := <-tail
	stop()
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w after %d packages (raise go test -timeout, or prebuild and set %s)", ctx.Err(), done.Load(), EnvBinary)
		}
		return fmt.Errorf("%w\n%s", err, last)
	}
	return nil
}

// countLines counts go build -v's lines (one per package) and returns the last few,
// which hold the compiler's error when the build fails.
func countLines(r io.Reader, n *atomic.Int64) string {
	const keep = 40
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n.Add(1)
		lines = append(lines, sc.Text())
		if len(lines) > keep {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// logProgress logs the package count until the returned stop is called.
func logProgress(t testing.TB, n *atomic.Int64) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				t.Logf("jaegertest: still building jaeger: %d packages so far (of ~2300)", n.Load())
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// findToolsModule walks up from the working directory, which go test sets to the
// package's directory, to the main module's tools/jaeger.
func findToolsModule() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod := filepath.Join(dir, toolsModule)
		if isFile(filepath.Join(mod, "go.mod")) {
			return mod, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New(toolsModule + "/go.mod not found above the working directory")
		}
		dir = parent
	}
}
