package cloudmap

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

// TestConformance runs the suite through registry.Open — parameters, the default
// AWS credential chain and the real SDK client — against the fake, whose operations
// answer SUBMITTED and PENDING before they succeed. Each registry gets its own
// namespace, created on open. Watch checks skip: Cloud Map has no change feed (Watch
// fails with registry.ErrNoWatch).
func TestConformance(t *testing.T) {
	cloudmaptest.SetCredentialsEnv(t)
	fake := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer fake.Close()
	var n atomic.Int64
	open := func() (registry.Registry, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return registry.Open(ctx, "cloudmap", map[string]string{
			ParamNamespace:        fmt.Sprintf("conformance-%d", n.Add(1)),
			ParamEndpoint:         fake.URL(),
			ParamCreateNamespace:  "true",
			ParamOperationTimeout: "10s",
		}, nil)
	}
	registrytest.Run(t, open, registrytest.Options{})
}
