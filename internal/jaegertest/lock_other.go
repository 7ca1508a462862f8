//go:build !unix

package jaegertest

import (
	"context"
	"errors"
)

// lockFile is unsupported off Unix: the Jaeger tests run on Linux, and building
// without the lock could let two test binaries race on the cache.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("jaegertest: building jaeger needs flock (Unix); set " + EnvBinary)
}
