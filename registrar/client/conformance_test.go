package client_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runRegistrarChild())
	}
	goleak.VerifyTestMain(m)
}

// served is a client whose Close also stops the registrar and backend it talks to,
// so the conformance suite's factory hands out self-contained registries.
type served struct {
	*client.Client
	stop func()
}

func (s served) Close() error {
	err := s.Client.Close()
	s.stop()
	return err
}

// TestConformance runs the registry conformance suite against the client talking to
// a real registrar over loopback gRPC, backed by the memory registry. The suite
// writes endpoints of several clusters, so this registrar accepts them all.
func TestConformance(t *testing.T) {
	registrytest.Run(t, func() (registry.Registry, error) {
		b := memory.New()
		srv, stop := runServer(t, registrar.Config{Cluster: "prod", AlsoAccept: []string{"*"}, Backend: b, BatchInterval: 10 * time.Millisecond})
		c, err := client.New(client.Options{Addresses: []string{srv.Addr().String()}})
		if err != nil {
			return nil, err
		}
		stopAll := func() {
			stop()
			b.Close()
		}
		return served{Client: c, stop: stopAll}, nil
	}, registrytest.Options{})
}

// runServer starts a registrar server on 127.0.0.1:0 and waits until it is ready;
// stop shuts it down gracefully and is safe to call more than once.
func runServer(t testing.TB, cfg registrar.Config) (*registrar.Server, func()) {
	t.Helper()
	s, stop := startServer(t, registrar.ServerConfig{Registrar: cfg, Listen: "127.0.0.1:0"})
	// Ready, so that a test's first read through a client that has no snapshot yet
	// is answered rather than refused as Unavailable.
	serverReady(t, s)
	return s, stop
}

// startServer runs a registrar server made from sc until the test ends (or stop),
// failing the test if Run reports an error.
func startServer(t testing.TB, sc registrar.ServerConfig) (*registrar.Server, func()) {
	t.Helper()
	s, err := registrar.NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("registrar %s: %v", s.Addr(), err)
		}
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return s, stop
}
