package server

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// A spire config that leaves out the audience must demand the one nodes ask for, or
// every node is refused.
func TestDefaultAudienceMatchesNodes(t *testing.T) {
	cfg, err := config.Parse([]byte("registration_auth:\n  type: spire\n  socket_path: /run/spire.sock\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.RegistrationAuth.Audience; got != nodeauth.DefaultAudience {
		t.Fatalf("config default audience %q, nodes request %q", got, nodeauth.DefaultAudience)
	}
}

// The config file's links section reaches every link's client configuration.
func TestLinkSettingsFromConfig(t *testing.T) {
	cfg, err := config.Parse([]byte(`
northbound: {endpoint: "127.0.0.1:0"}
southbound: {endpoint: "127.0.0.1:0"}
topology:
  links:
    - group: cloud
      neighbors: ["*"]
links:
  spire_socket_path: /run/spire/agent.sock
  backoff_initial: 1s
  backoff_max: 30s
  keepalive_interval: 20s
  keepalive_timeout: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := New(ctx, Options{Config: cfg, MetricsListen: ""})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for _, reg := range []controlplane.Registration{
		{NodeID: "c1", Group: "cloud", ConnDetails: []store.ConnectionDetails{{Endpoint: "c1:1", ExternalEndpoint: "lb:443", MTLSRequired: true}}},
		{NodeID: "e1", Group: "edge", ConnDetails: []store.ConnectionDetails{{Endpoint: "e1:1"}}},
	} {
		if _, err := srv.Service().NodeRegistered(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	links, err := srv.Store().ListLinks(ctx, store.LinkFilter{})
	if err != nil || len(links) != 1 {
		t.Fatalf("links %v, %v", links, err)
	}
	var cc controlplane.ClientConfig
	if err := json.Unmarshal([]byte(links[0].ConnConfig), &cc); err != nil {
		t.Fatal(err)
	}
	want := controlplane.ClientConfig{Endpoint: "lb:443", LinkID: links[0].ID,
		TLS:            controlplane.ClientTLS{SpireSocketPath: "/run/spire/agent.sock"},
		BackoffInitial: "1s", BackoffMax: "30s", KeepaliveInterval: "20s", KeepaliveTimeout: "5s",
		Segments: []string{"default"}} // a config-mode link without a segment is in the default one
	if !reflect.DeepEqual(cc, want) {
		t.Fatalf("client config %+v, want %+v", cc, want)
	}
}
