// Package browsertest drives headless Chromium (chromedp) for the tests of
// Switchboard's web pages: it starts the browser, or skips the test when there
// is none, and runs steps, evaluations and polls each under a deadline of its
// own, so that a page that never gets there fails the test with the step's name
// instead of hanging until the test binary's timeout.
//
// Only tests import it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// RequireEnv makes a missing browser a failure rather than a skip (CI sets it,
// and installs Debian's chromium).
const RequireEnv = "CI_REQUIRE_BROWSER"

// Browser starts headless Chromium and returns a context that drives one tab,
// closed when the test ends. width and height size the window (0: Chromium's
// default), which is what a full-page screenshot is as wide as.
func Browser(t testing.TB, width, height int) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("chromium is not on PATH and %s=1: install it (apt-get install chromium)", RequireEnv)
		}
		t.Skipf("chromium is not on PATH (apt-get install chromium); set %s=1 to make this a failure", RequireEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	if width > 0 && height > 0 {
		opts = append(opts, chromedp.WindowSize(width, height))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	// Start the browser on the tab's own context: the first run ties the
	// browser's life to the context it gets, and the steps below use shorter ones.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return tab
}

// Do runs steps within d, failing the test with what when they do not complete.
func Do(t testing.TB, tab context.Context, what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](t testing.TB, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// Poll waits up to d until a JavaScript expression is true in the page, and
// returns how long that took. A navigation under way (a form's submit) ends a
// poll early; it is polled again on the new page. On failure it reports what
// the page says.
func Poll(t testing.TB, tab context.Context, what, expr string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(tab, d)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
		if err == nil {
			return time.Since(start)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v (page says: %s)", what, err, Eval[string](t, tab, "document.body.innerText"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Screenshot writes a full-page PNG of the tab to path.
func Screenshot(t testing.TB, tab context.Context, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
