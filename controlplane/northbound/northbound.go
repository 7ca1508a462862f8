// Package northbound is the control plane's management API (ControlPlaneService), used by
// `switchboard ctl` and operators: list nodes, links, routes and segments, ask a node for
// its live connections and subscriptions, and — in API mode — change the topology and
// announce or withdraw wildcard routes (docs/controlplane.md, "Northbound access").
package northbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/groupsecrets"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// Server implements controlplanev1.ControlPlaneServiceServer.
type Server struct {
	controlplanev1.UnimplementedControlPlaneServiceServer
	svc     *controlplane.Service
	streams *nodestream.Handler
	enqueue func(controlplane.Result)
	log     *slog.Logger
	secrets *groupsecrets.Manager
}

// Option configures a Server.
type Option func(*Server)

// WithGroupSecrets lets the API manage groups' registration secrets through m;
// without it, the secret methods fail with FAILED_PRECONDITION.
func WithGroupSecrets(m *groupsecrets.Manager) Option { return func(s *Server) { s.secrets = m } }

// New returns the API over svc. Node queries go through streams; enqueue hands the
// outcome of a mutation to the reconcilers.
func New(svc *controlplane.Service, streams *nodestream.Handler, enqueue func(controlplane.Result), log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{svc: svc, streams: streams, enqueue: enqueue, log: log}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Server) ListNodes(ctx context.Context, _ *controlplanev1.ListNodesRequest) (*controlplanev1.ListNodesResponse, error) {
	nodes, err := s.svc.Store().ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &controlplanev1.ListNodesResponse{}
	for _, n := range nodes {
		resp.Nodes = append(resp.Nodes, nodeProto(n))
	}
	return resp, nil
}

func (s *Server) ListLinks(ctx context.Context, req *controlplanev1.ListLinksRequest) (*controlplanev1.ListLinksResponse, error) {
	keep, err := statusFilter(req.GetStatuses(), store.ParseLinkStatus)
	if err != nil {
		return nil, err
	}
	links, err := s.svc.Store().ListLinks(ctx, store.LinkFilter{
		SourceNodeID: req.GetSourceNodeId(), DestNodeID: req.GetDestNodeId(), Deleted: store.IncludeDeleted,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &controlplanev1.ListLinksResponse{}
	for _, l := range links {
		if keep(l.Status) {
			resp.Links = append(resp.Links, linkProto(l))
		}
	}
	return resp, nil
}

func (s *Server) ListRoutes(ctx context.Context, req *controlplanev1.ListRoutesRequest) (*controlplanev1.ListRoutesResponse, error) {
	keep, err := statusFilter(req.GetStatuses(), store.ParseRouteStatus)
	if err != nil {
		return nil, err
	}
	routes, err := s.svc.Store().ListRoutes(ctx, store.RouteFilter{
		SourceNodeID: req.GetSourceNodeId(), DestNodeID: req.GetDestNodeId(), Deleted: store.IncludeDeleted,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &controlplanev1.ListRoutesResponse{}
	for _, r := range routes {
		if keep(r.Status) {
			resp.Routes = append(resp.Routes, routeProto(r))
		}
	}
	return resp, nil
}

// ListSegments returns, in API mode, the segments as stored (what operators edit); in
// config mode, the segments the config file resolves to for the registered groups.
func (s *Server) ListSegments(ctx context.Context, req *controlplanev1.ListSegmentsRequest) (*controlplanev1.ListSegmentsResponse, error) {
	resp := &controlplanev1.ListSegmentsResponse{ConfigMode: s.svc.Mode() == config.ConfigMode}
	if resp.ConfigMode || req.GetResolved() {
		segs, err := s.svc.Segments(ctx)
		if err != nil {
			return nil, toStatus(err)
		}
		for _, seg := range segs {
			p := &controlplanev1.Segment{Name: seg.Name}
			for _, e := range seg.Edges {
				p.Links = append(p.Links, &controlplanev1.TopologyLink{GroupA: e[0], GroupB: e[1]})
			}
			resp.Segments = append(resp.Segments, p)
		}
		return resp, nil
	}
	segs, err := s.svc.Store().ListSegments(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	for _, seg := range segs {
		p := &controlplanev1.Segment{Name: seg.Name}
		for _, l := range seg.Links {
			p.Links = append(p.Links, &controlplanev1.TopologyLink{GroupA: l.GroupA, GroupB: l.GroupB})
		}
		resp.Segments = append(resp.Segments, p)
	}
	return resp, nil
}

func (s *Server) ListNodeConnections(ctx context.Context, req *controlplanev1.NodeRequest) (*controllerv1.ConnectionListResponse, error) {
	resp, err := s.ask(ctx, req.GetNodeId(), &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}},
	})
	if err != nil {
		return nil, err
	}
	out := resp.GetConnectionListResponse()
	if out == nil {
		return nil, status.Errorf(codes.Internal, "node %s answered a connection list request with %T", req.GetNodeId(), resp.GetPayload())
	}
	return out, nil
}

func (s *Server) ListNodeSubscriptions(ctx context.Context, req *controlplanev1.NodeRequest) (*controllerv1.SubscriptionListResponse, error) {
	resp, err := s.ask(ctx, req.GetNodeId(), &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_SubscriptionListRequest{SubscriptionListRequest: &controllerv1.SubscriptionListRequest{}},
	})
	if err != nil {
		return nil, err
	}
	out := resp.GetSubscriptionListResponse()
	if out == nil {
		return nil, status.Errorf(codes.Internal, "node %s answered a subscription list request with %T", req.GetNodeId(), resp.GetPayload())
	}
	return out, nil
}

func (s *Server) ask(ctx context.Context, nodeID string, msg *controllerv1.ControlMessage) (*controllerv1.ControlMessage, error) {
	if nodeID == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required ({group}/{node})")
	}
	resp, err := s.streams.Request(ctx, nodeID, msg)
	s.streams.LogSilence(s.log, nodeID) // this request may be the node's first timeout
	switch {
	case errors.Is(err, nodestream.ErrNotConnected):
		return nil, status.Errorf(codes.NotFound, "node %s is not connected", nodeID)
	case err != nil:
		return nil, toStatus(err)
	}
	return resp, nil
}

func (s *Server) AddSegment(ctx context.Context, req *controlplanev1.SegmentRequest) (*controlplanev1.MutationResponse, error) {
	return s.mutate(s.tracked(ctx, s.segmentState(ctx, req.GetName()), func() (controlplane.Result, error) {
		return s.svc.AddSegment(ctx, req.GetName())
	}))("segment %s added", req.GetName())
}

func (s *Server) RemoveSegment(ctx context.Context, req *controlplanev1.SegmentRequest) (*controlplanev1.MutationResponse, error) {
	return s.mutate(s.tracked(ctx, s.segmentState(ctx, req.GetName()), func() (controlplane.Result, error) {
		return s.svc.RemoveSegment(ctx, req.GetName())
	}))("segment %s removed", req.GetName())
}

func (s *Server) AddTopologyLink(ctx context.Context, req *controlplanev1.TopologyLinkRequest) (*controlplanev1.MutationResponse, error) {
	return s.mutate(s.tracked(ctx, s.segmentState(ctx, segmentName(req)), func() (controlplane.Result, error) {
		return s.svc.AddSegmentLink(ctx, req.GetSegment(), req.GetGroupA(), req.GetGroupB())
	}))("link %s <-> %s added to segment %s", req.GetGroupA(), req.GetGroupB(), segmentName(req))
}

func (s *Server) RemoveTopologyLink(ctx context.Context, req *controlplanev1.TopologyLinkRequest) (*controlplanev1.MutationResponse, error) {
	return s.mutate(s.tracked(ctx, s.segmentState(ctx, segmentName(req)), func() (controlplane.Result, error) {
		return s.svc.RemoveSegmentLink(ctx, req.GetSegment(), req.GetGroupA(), req.GetGroupB())
	}))("link %s <-> %s removed from segment %s", req.GetGroupA(), req.GetGroupB(), segmentName(req))
}

func (s *Server) AddRoute(ctx context.Context, req *controlplanev1.RouteRequest) (*controlplanev1.MutationResponse, error) {
	name, err := routeName(req)
	if err != nil {
		return nil, err
	}
	return s.mutate(s.tracked(ctx, s.templateState(ctx, req.GetDestNodeId(), name), func() (controlplane.Result, error) {
		return s.svc.AddWildcardRoute(ctx, req.GetDestNodeId(), name)
	}))("route %s via %s added", name, req.GetDestNodeId())
}

func (s *Server) DeleteRoute(ctx context.Context, req *controlplanev1.RouteRequest) (*controlplanev1.MutationResponse, error) {
	name, err := routeName(req)
	if err != nil {
		return nil, err
	}
	return s.mutate(s.tracked(ctx, s.templateState(ctx, req.GetDestNodeId(), name), func() (controlplane.Result, error) {
		return s.svc.DeleteWildcardRoute(ctx, req.GetDestNodeId(), name)
	}))("route %s via %s deleted", name, req.GetDestNodeId())
}

// tracked runs a mutation and, when the call is audited, records the changed object
// as state reads it before and after. The reads are not atomic with the change (a
// concurrent mutation may show in either); they are for people reading the audit log,
// and cost nothing when no audit is asked for.
func (s *Server) tracked(ctx context.Context, state func() any, do func() (controlplane.Result, error)) (controlplane.Result, error) {
	if !access.Audited(ctx) {
		return do()
	}
	before := state()
	res, err := do()
	if err == nil {
		access.RecordChange(ctx, before, state())
	}
	return res, err
}

// segmentState reads a stored segment with its links; nil when absent.
func (s *Server) segmentState(ctx context.Context, name string) func() any {
	return func() any {
		segs, err := s.svc.Store().ListSegments(ctx)
		if err != nil {
			return "unknown: " + err.Error()
		}
		for _, seg := range segs {
			if seg.Name == name {
				p := &controlplanev1.Segment{Name: seg.Name}
				for _, l := range seg.Links {
					p.Links = append(p.Links, &controlplanev1.TopologyLink{GroupA: l.GroupA, GroupB: l.GroupB})
				}
				return p
			}
		}
		return nil
	}
}

// templateState reads the wildcard route a route request names; nil when absent.
func (s *Server) templateState(ctx context.Context, nodeID string, name store.Name) func() any {
	return func() any {
		tpls, err := s.svc.Store().ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes, DestNodeID: nodeID, Name: &name})
		if err != nil {
			return "unknown: " + err.Error()
		}
		if len(tpls) == 0 {
			return nil
		}
		return routeProto(tpls[0])
	}
}

// mutate turns a service outcome into a response: reconcilers are queued on success,
// and problems that did not stop the change are reported in the message.
func (s *Server) mutate(res controlplane.Result, err error) func(format string, args ...any) (*controlplanev1.MutationResponse, error) {
	return func(format string, args ...any) (*controlplanev1.MutationResponse, error) {
		if err != nil {
			return nil, toStatus(err)
		}
		s.enqueue(res)
		msg := fmt.Sprintf(format, args...)
		for _, p := range res.Problems {
			msg += "; warning: " + p.Error()
		}
		return &controlplanev1.MutationResponse{Message: msg}, nil
	}
}

// segmentName is the segment a topology link request changes: the default one when
// it names none.
func segmentName(req *controlplanev1.TopologyLinkRequest) string {
	if req.GetSegment() == "" {
		return controlplane.DefaultSegment
	}
	return req.GetSegment()
}

func routeName(req *controlplanev1.RouteRequest) (store.Name, error) {
	if req.GetDestNodeId() == "" {
		return store.Name{}, status.Error(codes.InvalidArgument, "dest_node_id is required ({group}/{node})")
	}
	name, err := store.ParseName(req.GetName())
	if err != nil {
		return store.Name{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.ComponentId != nil {
		name = name.WithID(req.GetComponentId())
	}
	return name, nil
}

// toStatus maps the core's errors to gRPC codes (docs/development.md, "Conventions").
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, controlplane.ErrConfigMode), errors.Is(err, controlplane.ErrStaleSession), errors.Is(err, controlplane.ErrClaimRejected):
		code = codes.FailedPrecondition
	case errors.Is(err, groupsecrets.ErrUnavailable), errors.Is(err, groupsecrets.ErrFromFile):
		code = codes.FailedPrecondition
	case errors.Is(err, controlplane.ErrInvalidArgument), errors.Is(err, store.ErrInvalidName), errors.Is(err, groupsecrets.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, store.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, store.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, nodestream.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, nodestream.ErrStreamClosed), errors.Is(err, store.ErrClosed):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

func nodeProto(n store.Node) *controlplanev1.Node {
	p := &controlplanev1.Node{Id: n.ID, Group: n.Group, Connected: n.Connected, LastUpdated: timestamppb.New(n.LastUpdated)}
	for _, cd := range n.ConnDetails {
		p.ConnectionDetails = append(p.ConnectionDetails, &controllerv1.ConnectionDetails{Endpoint: cd.Endpoint, ExternalEndpoint: cd.ExternalEndpoint})
	}
	return p
}

func linkProto(l store.Link) *controlplanev1.Link {
	return &controlplanev1.Link{
		LinkId: l.ID, SourceNodeId: l.SourceNodeID, DestGroup: l.DestGroup, DestNodeId: l.DestNodeID,
		DestEndpoint: l.DestEndpoint, ConnectionConfig: l.ConnConfig, Status: l.Status.String(),
		StatusMessage: l.StatusMessage, Deleted: l.Deleted, LastUpdated: timestamppb.New(l.LastUpdated),
	}
}

func routeProto(r store.Route) *controlplanev1.Route {
	p := &controlplanev1.Route{
		Id: r.ID, SourceNodeId: r.SourceNodeID, DestNodeId: r.DestNodeID, Name: store.NewName(r.Name.Components[0], r.Name.Components[1], r.Name.Components[2]).String(),
		LinkId: r.LinkID, Status: r.Status.String(), StatusMessage: r.StatusMessage, Deleted: r.Deleted,
		LastUpdated: timestamppb.New(r.LastUpdated),
	}
	if r.Name.HasID {
		id := r.Name.ID
		p.ComponentId = &id
	}
	return p
}
