package embedetcd

import (
	"context"
	"testing"
	"time"
)

// startTimeout bounds how long New waits for a cluster, so a server that cannot
// elect a leader fails the test instead of hanging it.
const startTimeout = 60 * time.Second

// New starts a cluster for one test and stops it when the test ends; a failure to
// start fails the test.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	c, err := Start(ctx, opts)
	if err != nil {
		tb.Fatalf("start embedded etcd: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
