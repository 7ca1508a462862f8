package northbound

import (
	"context"
	"fmt"
	"net"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/groupsecrets"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// ListGroups lists every group that has nodes or a registration secret, each with its
// nodes and where its secret comes from.
func (s *Server) ListGroups(ctx context.Context, _ *controlplanev1.ListGroupsRequest) (*controlplanev1.ListGroupsResponse, error) {
	nodes, err := s.svc.Store().ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return nil, toStatus(err)
	}
	byName := map[string]*controlplanev1.Group{}
	var order []string
	group := func(name string) *controlplanev1.Group {
		g, ok := byName[name]
		if !ok {
			g = &controlplanev1.Group{Name: name, SecretSource: s.secretSource(name)}
			byName[name] = g
			order = append(order, name)
		}
		return g
	}
	for _, n := range nodes {
		g := group(n.Group)
		g.Nodes = append(g.Nodes, nodeProto(n))
	}
	if s.secrets != nil {
		withSecret, err := s.secrets.Groups(ctx)
		if err != nil {
			return nil, toStatus(err)
		}
		for _, name := range withSecret {
			group(name)
		}
	}
	resp := &controlplanev1.ListGroupsResponse{}
	slices.Sort(order)
	for _, name := range order {
		resp.Groups = append(resp.Groups, byName[name])
	}
	return resp, nil
}

func (s *Server) secretSource(group string) string {
	if s.secrets == nil {
		return groupsecrets.SourceNone
	}
	return s.secrets.Source(group)
}

func (s *Server) AddGroupSecret(ctx context.Context, req *controlplanev1.GroupSecretRequest) (*controlplanev1.MutationResponse, error) {
	if err := s.secretCall(ctx); err != nil {
		return nil, err
	}
	if err := s.secrets.Add(ctx, req.GetGroup(), req.GetSecret()); err != nil {
		return nil, toStatus(err)
	}
	return &controlplanev1.MutationResponse{Message: fmt.Sprintf("secret of group %s added", req.GetGroup())}, nil
}

func (s *Server) RotateGroupSecret(ctx context.Context, req *controlplanev1.GroupSecretRequest) (*controlplanev1.MutationResponse, error) {
	if err := s.secretCall(ctx); err != nil {
		return nil, err
	}
	if err := s.secrets.Rotate(ctx, req.GetGroup(), req.GetSecret()); err != nil {
		return nil, toStatus(err)
	}
	return &controlplanev1.MutationResponse{Message: fmt.Sprintf(
		"secret of group %s rotated; nodes that registered with the old one stay connected", req.GetGroup())}, nil
}

func (s *Server) RemoveGroupSecret(ctx context.Context, req *controlplanev1.GroupRequest) (*controlplanev1.MutationResponse, error) {
	if err := s.secretCall(ctx); err != nil {
		return nil, err
	}
	n, err := s.secrets.Remove(ctx, req.GetGroup())
	if err != nil {
		return nil, toStatus(err)
	}
	return &controlplanev1.MutationResponse{Message: fmt.Sprintf(
		"secret of group %s removed; %d connected node(s) disconnected", req.GetGroup(), n)}, nil
}

// secretCall refuses secret management when it is not set up, and a secret that
// crossed a network in the clear: the call must come over TLS or from loopback.
func (s *Server) secretCall(ctx context.Context) error {
	if s.secrets == nil {
		return status.Error(codes.FailedPrecondition, "group secrets cannot be managed: registration_auth.type is not shared_secret")
	}
	return checkPrivateChannel(ctx)
}

// checkPrivateChannel passes a call that came over TLS or from a loopback address.
func checkPrivateChannel(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.FailedPrecondition, "refusing a secret from an unknown peer")
	}
	if _, tls := p.AuthInfo.(credentials.TLSInfo); tls {
		return nil
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"refusing a secret sent in plaintext from %s: use TLS on the northbound endpoint, or call from loopback", p.Addr)
}

// statusFilter returns a test for the states a list request names; every state
// passes when it names none. A name parse does not know is InvalidArgument.
func statusFilter[S comparable](names []string, parse func(string) (S, error)) (func(S) bool, error) {
	if len(names) == 0 {
		return func(S) bool { return true }, nil
	}
	want := map[S]bool{}
	for _, n := range names {
		st, err := parse(n)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "statuses: %v", err)
		}
		want[st] = true
	}
	return func(st S) bool { return want[st] }, nil
}
