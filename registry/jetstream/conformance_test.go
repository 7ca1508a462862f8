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
// stream per registry, once per read path.
func TestConformance(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	for _, rc := range readCases {
		t.Run(rc.name, func(t *testing.T) {
			registrytest.Run(t, func() (registry.Registry, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := sbjs.New(ctx, nc, sbjs.Options{Stream: freshStream(), CreateStream: true, Lookup: rc.lookup})
				if err == nil && rc.path != "" {
					sbjs.ForceReadPath(r, rc.path)
				}
				return r, err
			}, registrytest.Options{Wait: 10 * time.Second})
		})
	}
}
