package server

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/groupsecrets"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// openGroupSecrets loads the groups' registration secrets kept in the store into the
// authenticator (API mode, shared_secret) and makes the manager the northbound API
// changes them through.
func (s *Server) openGroupSecrets(ctx context.Context) error {
	verifier, _ := s.auth.(*nodeauth.SharedSecret)
	m, err := groupsecrets.New(ctx, groupsecrets.Options{
		Store: s.store, Verifier: verifier, Mode: s.svc.Mode(),
		FileGroups: slices.Sorted(maps.Keys(s.o.Config.RegistrationAuth.Secrets)),
		Disconnect: s.disconnectGroup,
	})
	if err != nil {
		return err
	}
	s.secrets = m
	return nil
}

// disconnectGroup closes the control stream of every connected node of group; each
// node's RPC ends with PERMISSION_DENIED and its departure runs as for a crash.
func (s *Server) disconnectGroup(group string) int {
	n := 0
	for _, id := range s.streams.Nodes() {
		if controlplane.GroupOf(id) != group {
			continue
		}
		cause := fmt.Errorf("%w: the registration secret of group %s was removed", nodestream.ErrRevoked, group)
		if s.streams.Close(id, cause) {
			n++
		}
	}
	if n > 0 {
		s.log.Warn("group's registration secret removed: its nodes were disconnected", "group", group, "nodes", n)
	}
	return n
}
