package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	registrytest.Run(t, func() (registry.Registry, error) { return memory.New(), nil }, registrytest.Options{})
}
