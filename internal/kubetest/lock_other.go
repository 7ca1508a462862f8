//go:build !unix

package kubetest

import (
	"context"
	"errors"
)

// lockFile is unsupported off Unix: kube-apiserver tests run on Linux, and building
// without the lock could let two test binaries race on the cache.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("kubetest: building kube-apiserver needs flock (Unix); set " + EnvBinary)
}
