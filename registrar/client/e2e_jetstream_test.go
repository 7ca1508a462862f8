package client_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// jetstreamBackend opens the JetStream registry on its own connection, as a separate
// registrar process would.
func jetstreamBackend(t *testing.T, url string) registry.Registry {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r, err := sbjs.New(testCtx(t), nc, sbjs.Options{CreateStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// The convergence scenario again, over the JetStream backend: the registrar relies
// only on registry.Registry and registry.Watcher.
func TestE2EJetStreamReplicasConverge(t *testing.T) {
	ns, err := embednats.Start(testCtx(t), embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	cfg := func(cluster string) registrar.Config {
		return registrar.Config{Cluster: cluster, Backend: jetstreamBackend(t, ns.ClientURL()), SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond}
	}
	east1, _ := runServer(t, cfg("east"))
	east2, _ := runServer(t, cfg("east"))
	west1, _ := runServer(t, cfg("west"))
	f := &fleet{}
	for i := range 6 {
		cluster, addrs := "east", []string{addr(east1), addr(east2)}
		switch i % 3 {
		case 1:
			slices.Reverse(addrs)
		case 2:
			cluster, addrs = "west", []string{addr(west1)}
		}
		f.clients = append(f.clients, newClient(t, client.Options{Addresses: addrs, InOrder: true}))
		f.register(t, i, ep(cluster, "web", fmt.Sprintf("10.7.%d.1", i), 80), ep(cluster, "api", fmt.Sprintf("10.7.%d.2", i), 80))
	}
	f.converged(t, 30*time.Second)
	direct := jetstreamBackend(t, ns.ClientURL())
	eventually(t, 10*time.Second, "every write persisted in the stream", func() bool {
		return slices.Equal(keysOf(list(t, direct, endpoint.Filter{})), f.want)
	})
}
