package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// Identical refreshes change nothing anyone sees, so they bring no event; the
// registrar must still tell the client when they are persisted (a progress
// notification), and the client must not remember every refresh meanwhile.
func TestQuietRegistrarConfirmsRefreshes(t *testing.T) {
	b := memory.New()
	defer b.Close()
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b, BatchInterval: 5 * time.Millisecond})
	c := newClient(t, client.Options{Addresses: []string{srv.Addr().String()}})
	waitReady(t, c)
	ops := make([]registry.Op, 10)
	for i := range ops {
		ops[i] = registry.Register(ep("east", "web", fmt.Sprintf("10.0.0.%d", i+1), 80))
	}
	most := 0
	for range 1000 {
		apply(t, c, ops...)
		most = max(most, client.Unconfirmed(c))
	}
	if limit := 2*len(ops) + 64; most > limit {
		t.Fatalf("the client remembered up to %d unconfirmed writes for %d keys, want at most %d", most, len(ops), limit)
	}
	eventually(t, 10*time.Second, "every refresh confirmed", func() bool { return client.Unconfirmed(c) == 0 })
}
