//go:build unix

package toolbin

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often lockFile retries; flock itself cannot wait with a
// deadline, so it is tried without blocking until ctx ends.
const lockPoll = 500 * time.Millisecond

// lockFile takes an exclusive flock on path, which the kernel releases if the
// process dies mid-build, so a killed test never leaves the cache locked.
func lockFile(ctx context.Context, path, _ string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another build to release %s: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
