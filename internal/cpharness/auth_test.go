package cpharness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

var (
	cloudSecret = strings.Repeat("c", 40)
	edgeSecret  = strings.Repeat("e", 40)
)

func provider(t *testing.T, secret string) nodeauth.TokenProvider {
	t.Helper()
	p, err := nodeauth.NewSharedSecretProvider(secret, nodeauth.SharedSecretOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedSecretFromConfig: with registration_auth in the config file, nodes with
// their group's secret register and converge; a node with the wrong secret keeps
// retrying, is never registered and never stored.
func TestSharedSecretFromConfig(t *testing.T) {
	forStores(t, func(t *testing.T, db string) {
		cfg := testConfig(t, db, starTopology+"registration_auth:\n  type: shared_secret\n  secrets:\n"+
			"    cloud: "+cloudSecret+"\n    edge: "+edgeSecret+"\n")
		c := startCP(t, cfg)
		f := newFabric(t)
		for _, n := range []NodeConfig{
			{Group: "cloud", ID: "n1", Tokens: provider(t, cloudSecret)},
			{Group: "edge", ID: "n1", Tokens: provider(t, edgeSecret)},
		} {
			n.Target = c.SouthboundAddr()
			if _, err := f.Start(n); err != nil {
				t.Fatal(err)
			}
		}
		announce(t, f, c, "edge/n1")
		converge(t, c, f, true)

		rogue, err := f.Start(NodeConfig{Group: "edge", ID: "n2", Tokens: provider(t, cloudSecret), Target: c.SouthboundAddr()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := timeout(t, 20*time.Second)
		if err := Eventually(ctx, func() error {
			if rogue.Controller().Stats().Attempts < 3 {
				return errors.New("fewer than 3 attempts")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if st := rogue.Controller().Stats(); st.Registrations != 0 {
			t.Fatalf("node with the wrong secret registered: %+v", st)
		}
		if _, err := c.Store().GetNode(context.Background(), rogue.ID()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("denied node stored: %v", err)
		}
		rogue.Crash() // stop its retries before the cleanup checks
	})
}

// TestBadAuthConfigRefused: a config whose auth cannot be built stops the control
// plane from starting, naming the section.
func TestBadAuthConfigRefused(t *testing.T) {
	cfg := testConfig(t, config.DatabaseInMemory, "")
	cfg.RegistrationAuth = config.RegistrationAuth{Type: config.AuthSharedSecret, Secrets: map[string]string{"g": "short"}}
	_, err := newServer(cfg)
	if err == nil || !strings.Contains(err.Error(), "registration_auth") {
		t.Fatalf("want a registration_auth error, got %v", err)
	}
}
