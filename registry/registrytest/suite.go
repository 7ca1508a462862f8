// Package registrytest is the conformance suite every registry backend runs with one
// call, in the manner of testing/fstest.TestFS:
//
//	func TestConformance(t *testing.T) {
//		registrytest.Run(t, func() (registry.Registry, error) { return open(t) }, registrytest.Options{})
//	}
//
// Each rule of registry.Registry and registry.Watcher is one named check. Run reports
// every broken rule as a failed subtest; Check returns them as errors, which is how the
// suite's own tests prove that it catches broken backends. A rule the registry.Front
// keeps for every backend (a re-read sends only the differences) is checked here
// once, through each backend's driver.
//
// It must not import a backend: backends import it from their tests.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Factory opens a new, empty registry. The suite closes what it opens.
type Factory func() (registry.Registry, error)

// Options tune the suite to a backend.
type Options struct {
	// TTL is the short TTL used by expiry checks; default one second.
	TTL time.Duration
	// Wait bounds how long an eventually-visible effect (an expiry, a watch event) may
	// take; default 15 seconds. Expiry checks wait TTL+Wait.
	Wait time.Duration
	// Skip names checks the backend is exempt from, with the reason, e.g. a backend
	// whose TTLs are coarser than the suite's. Prefer fixing the backend.
	Skip map[string]string
}

func (o Options) withDefaults() Options {
	if o.TTL == 0 {
		o.TTL = time.Second
	}
	if o.Wait == 0 {
		o.Wait = 15 * time.Second
	}
	return o
}

// ErrSkipped is returned by Check for a check the backend cannot run (a watch check on
// a backend without a change feed).
var ErrSkipped = errors.New("skipped")

type check struct {
	name string
	fn   func(ctx context.Context, h *harness) error
}

// Checks lists the names of every check, in the order they run.
func Checks() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

// Run runs every check as a subtest of t.
func Run(t *testing.T, open Factory, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := opts.Skip[c.name]; ok {
				t.Skip(why)
			}
			err := runOne(c, open, opts)
			switch {
			case errors.Is(err, ErrSkipped):
				t.Skip(err.Error())
			case err != nil:
				t.Error(err)
			}
		})
	}
}

// Check runs every check and returns the errors by check name; a passing check is
// absent from the map.
func Check(open Factory, opts Options) map[string]error {
	opts = opts.withDefaults()
	failed := map[string]error{}
	for _, c := range checks {
		if err := runOne(c, open, opts); err != nil {
			failed[c.name] = err
		}
	}
	return failed
}

func runOne(c check, open Factory, opts Options) error {
	// Every check finishes in a few waits at most; the deadline turns a hang into a
	// failure instead of a stuck CI run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*(opts.TTL+opts.Wait))
	defer cancel()
	h := &harness{open: open, opts: opts}
	defer h.closeAll()
	err := c.fn(ctx, h)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("check overran its deadline: %w", ctx.Err())
	}
	return err
}

type harness struct {
	open   Factory
	opts   Options
	opened []registry.Registry
}

func (h *harness) registry() (registry.Registry, error) {
	r, err := h.open()
	if err != nil {
		return nil, fmt.Errorf("open registry: %w", err)
	}
	h.opened = append(h.opened, r)
	return r, nil
}

func (h *harness) closeAll() {
	for _, r := range h.opened {
		_ = r.Close()
	}
}
