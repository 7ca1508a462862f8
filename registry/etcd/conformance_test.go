package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

func TestConformance(t *testing.T) {
	registrytest.Run(t, func() (registry.Registry, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return New(ctx, Options{Endpoints: shared.Endpoints(), Prefix: uniquePrefix(t)})
	}, registrytest.Options{})
}
