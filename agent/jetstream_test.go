package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	_ "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

var streamSeq atomic.Int64

// TestDiscoveryJetStream runs the discovery scenarios against a live embedded NATS
// server: the agent and "another node" each have their own connection, and the
// agent follows the stream's watch.
func TestDiscoveryJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	testDiscovery(t, func(t *testing.T) (registry.Registry, registry.Registry) {
		n := streamSeq.Add(1)
		params := map[string]string{
			"nats-url": srv.ClientURL(), "storage": "memory",
			"stream": fmt.Sprintf("AGENT%d", n), "subject-prefix": fmt.Sprintf("agent%d.reg", n),
		}
		open := func() registry.Registry {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := registry.Open(ctx, "jetstream", params, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			return r
		}
		return open(), open()
	})
}
