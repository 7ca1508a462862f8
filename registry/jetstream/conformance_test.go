package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

// TestConformance runs the registry suite against an embedded server, with a fresh
// stream per registry, once per lookup strategy.
func TestConformance(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	for _, lookup := range []string{sbjs.LookupConsumer, sbjs.LookupDirect} {
		t.Run(lookup, func(t *testing.T) {
			registrytest.Run(t, func() (registry.Registry, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return sbjs.New(ctx, nc, sbjs.Options{Stream: freshStream(), CreateStream: true, Lookup: lookup})
			}, registrytest.Options{Wait: 10 * time.Second})
		})
	}
}
