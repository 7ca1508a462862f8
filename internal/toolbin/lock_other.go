//go:build !unix

package toolbin

import (
	"context"
	"errors"
)

// lockFile is unsupported off Unix: the tools' tests run on Linux, and building
// without the lock could let two test binaries race on the cache. envBinary names
// the variable that gives a prebuilt binary instead.
func lockFile(_ context.Context, _, envBinary string) (func(), error) {
	return nil, errors.New("building needs flock (Unix); set " + envBinary)
}
