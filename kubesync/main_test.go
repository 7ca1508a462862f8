package kubesync

import (
	"testing"

	"go.uber.org/goleak"
)

// Run stops everything it started: informers, queues, workers and the registry feed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
