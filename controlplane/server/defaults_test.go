package server

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/auth"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
)

// A spire config that leaves out the audience must demand the one nodes ask for, or
// every node is refused.
func TestDefaultAudienceMatchesNodes(t *testing.T) {
	cfg, err := config.Parse([]byte("registration_auth:\n  type: spire\n  socket_path: /run/spire.sock\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.RegistrationAuth.Audience; got != auth.DefaultAudience {
		t.Fatalf("config default audience %q, nodes request %q", got, auth.DefaultAudience)
	}
}
