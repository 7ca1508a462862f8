package toolbin

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

// Tool describes one pinned tool binary and how a test opts in to it.
type Tool struct {
	// Name is the binary's name: it names the cached file (Name-Version) and the
	// build in log messages, e.g. "kube-apiserver".
	Name string
	// Title is how skip messages name the tool, e.g. "Jaeger"; Name if empty.
	Title string
	// Prefix starts failure and log messages, e.g. "kubetest".
	Prefix string
	// Version is the release the tools module pins. It names the cached binary, so
	// changing the pin must change it too.
	Version string
	// Module is the tools module's directory relative to the main module's root,
	// e.g. "tools/kube-apiserver".
	Module string
	// Package is the import path of the main package to build.
	Package string
	// LDFlags, if set, are passed to go build -ldflags. Only the link step sees
	// them, so the compiled packages stay shared in GOCACHE.
	LDFlags string
	// EnvBinary names the environment variable that gives a prebuilt binary.
	EnvBinary string
	// EnvAllowBuild names the environment variable that, set to 1, allows building
	// (and then reusing) the cached binary.
	EnvAllowBuild string
	// MakeTarget is the make target the skip message suggests, e.g. "test-kube".
	MakeTarget string
	// BuildTimeout bounds the build; DefaultBuildTimeout if zero. When the test has
	// its own deadline the build stops a little before it, to fail with a clear
	// message instead of a panic.
	BuildTimeout time.Duration
	// Packages is roughly how many packages a cold build compiles, for the
	// progress messages; 0 leaves the total out.
	Packages int
}

// DefaultBuildTimeout is the build limit when Tool.BuildTimeout is zero. A cold
// build of kube-apiserver or Jaeger takes several minutes on a loaded 2-core
// machine, so the limit leaves room for a slower one.
const DefaultBuildTimeout = 30 * time.Minute

// Bounds on the build besides Tool.BuildTimeout.
const (
	deadlineSlack = 30 * time.Second
	progressEvery = 30 * time.Second
)

// buildMus holds one mutex per cached path; it stops two tests of one binary from
// both waiting on the file lock and then logging the same build twice.
var buildMus sync.Map // string -> *sync.Mutex

// Binary returns the path of the tool's binary, building it if allowed, and skips
// the test when neither EnvBinary nor EnvAllowBuild is set.
func (tl Tool) Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(tl.EnvBinary); p != "" {
		return tl.givenBinary(t, p)
	}
	if os.Getenv(tl.EnvAllowBuild) != "1" {
		t.Skipf("needs a real %s: set %s=1 to build it (minutes, once) or %s=/path/to/%s; `make %s` does the first",
			tl.title(), tl.EnvAllowBuild, tl.EnvBinary, tl.Name, tl.MakeTarget)
	}
	path, err := tl.CachedPath()
	if err != nil {
		t.Fatalf("%s: %v", tl.Prefix, err)
	}
	if isFile(path) {
		return path
	}
	mu, _ := buildMus.LoadOrStore(path, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	ctx, cancel := tl.buildContext(t)
	defer cancel()
	if err := tl.buildLocked(ctx, t, path); err != nil {
		t.Fatalf("%s: build %s: %v", tl.Prefix, tl.Name, err)
	}
	return path
}

func (tl Tool) title() string {
	if tl.Title != "" {
		return tl.Title
	}
	return tl.Name
}

// givenBinary checks an explicitly named binary: a wrong path is a configuration
// mistake to report, not a reason to skip.
func (tl Tool) givenBinary(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil || !isFile(abs) {
		t.Fatalf("%s: %s=%s: not a file", tl.Prefix, tl.EnvBinary, p)
	}
	return abs
}

// CachedPath is the per-user cache location of the built binary. os.UserCacheDir
// honours XDG_CACHE_HOME.
func (tl Tool) CachedPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("user cache dir: %w", err)
	}
	return filepath.Join(dir, "switchboard", tl.Name+"-"+tl.Version), nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// buildContext bounds the build by BuildTimeout and, if sooner, the test's deadline.
func (tl Tool) buildContext(t testing.TB) (context.Context, context.CancelFunc) {
	timeout := tl.BuildTimeout
	if timeout == 0 {
		timeout = DefaultBuildTimeout
	}
	deadline := time.Now().Add(timeout)
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := tt.Deadline(); ok && d.Add(-deadlineSlack).Before(deadline) {
			deadline = d.Add(-deadlineSlack)
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}

// buildLocked builds path unless another process did while this one waited for the
// lock, so that parallel test binaries build once.
func (tl Tool) buildLocked(ctx context.Context, t testing.TB, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, path+".lock", tl.EnvBinary)
	if err != nil {
		return err
	}
	defer unlock()
	if isFile(path) {
		return nil
	}
	return tl.build(ctx, t, path)
}

// build compiles into a private directory beside path and renames the result into
// place, so no reader ever sees a half-written binary.
func (tl Tool) build(ctx context.Context, t testing.TB, path string) error {
	mod, err := tl.ModuleDir()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := filepath.Join(tmp, tl.Name)
	t.Logf("%s: building %s %s into %s (takes minutes the first time)", tl.Prefix, tl.Name, tl.Version, path)
	start := time.Now()
	if err := tl.goBuild(ctx, t, mod, out); err != nil {
		return err
	}
	t.Logf("%s: built %s in %s", tl.Prefix, tl.Name, time.Since(start).Round(time.Second))
	return os.Rename(out, path)
}

// goBuild runs `go build -v` in the tools module, logging how many packages it has
// compiled every progressEvery so a long build does not look hung.
func (tl Tool) goBuild(ctx context.Context, t testing.TB, dir, out string) error {
	args := []string{"build", "-v"}
	if tl.LDFlags != "" {
		args = append(args, "-ldflags", tl.LDFlags)
	}
	args = append(args, "-o", out, tl.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// The tools' upstream releases are statically linked; that also spares the
	// build a C toolchain.
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
	stop := tl.logProgress(t, &done)
	last := <-tail
	stop()
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w after %d packages (raise go test -timeout, or prebuild and set %s)", ctx.Err(), done.Load(), tl.EnvBinary)
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
func (tl Tool) logProgress(t testing.TB, n *atomic.Int64) (stop func()) {
	total := ""
	if tl.Packages > 0 {
		total = fmt.Sprintf(" (of ~%d)", tl.Packages)
	}
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
				t.Logf("%s: still building %s: %d packages so far%s", tl.Prefix, tl.Name, n.Load(), total)
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// ModuleDir finds the tools module by walking up from the working directory, which
// go test sets to the package's directory, to the main module's Module.
func (tl Tool) ModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod := filepath.Join(dir, tl.Module)
		if isFile(filepath.Join(mod, "go.mod")) {
			return mod, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New(tl.Module + "/go.mod not found above the working directory")
		}
		dir = parent
	}
}

// GoMod returns the tools module's go.mod, for tests that check it pins Version.
func (tl Tool) GoMod() ([]byte, error) {
	mod, err := tl.ModuleDir()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(mod, "go.mod"))
}
