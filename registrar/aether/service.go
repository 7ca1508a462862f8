package aether

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Registrar is what the service needs of Switchboard's registrar; package
// registrar implements it (aether_hooks.go).
type Registrar interface {
	// Cluster is the registrar's own cluster: an endpoint registered without one
	// is of it, and UnregisterEndpoint removes endpoints of it.
	Cluster() string
	// Accepts reports whether the registrar takes writes for cluster: its own,
	// and those it also accepts.
	Accepts(cluster string) bool
	// CallerNode is the node the caller's client certificate names when the
	// registrar authorizes writes, else "".
	CallerNode(ctx context.Context) string
	// Write applies ops, all or none, as the registrar's own API does: its
	// cluster check and write authorization apply.
	Write(ctx context.Context, ops []registry.Op) error
	// MayRead and Ready are the registrar's checks of a read.
	MayRead(ctx context.Context) error
	Ready() error
	// Endpoints returns the endpoints f matches and the version (resume token)
	// they were read at.
	Endpoints(f endpoint.Filter) ([]endpoint.Endpoint, string)
	// Catalog returns the number of endpoints per service of the protocols visible
	// accepts, at version; ok is false when the registrar cannot tell.
	Catalog(version string, visible func(protocol string) bool) (counts map[string]int, ok bool)
	// Watch runs one of the registrar's watchers for stream with request req,
	// handing each message it sends to send in wire form.
	Watch(stream grpc.ServerStream, req *registrarv1.WatchEndpointsRequest, send func([]byte) error) error
}

// Limits of one request, as the registrar's own API has them.
const (
	maxIPs      = 10000
	maxServices = 10000
)

// Service implements aetherregistrarv1.RegistrarServiceServer over a Registrar.
type Service struct {
	aetherregistrarv1.UnimplementedRegistrarServiceServer
	reg Registrar
}

// Register registers Aether's registrar API on s, serving through reg. s must use
// the codec of registrar.ServerOptions, whose faults rpcinput.Service reports.
func Register(s grpc.ServiceRegistrar, reg Registrar) {
	s.RegisterService(rpcinput.Service(&aetherregistrarv1.RegistrarService_ServiceDesc), &Service{reg: reg})
}

// RegisterEndpoint stores the endpoint as ours (mapping.go), under the caller's
// node.
func (s *Service) RegisterEndpoint(ctx context.Context, req *aetherregistrarv1.RegisterEndpointRequest) (*aetherregistrarv1.RegisterEndpointResponse, error) {
	e, err := ToEndpoint(req.GetServiceName(), req.GetProtocol(), req.GetEndpoint(), s.reg.Cluster())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	e.Node = s.reg.CallerNode(ctx)
	if err := s.reg.Write(ctx, []registry.Op{{Kind: registry.OpRegister, Endpoint: e}}); err != nil {
		return nil, err
	}
	return &aetherregistrarv1.RegisterEndpointResponse{}, nil
}

// UnregisterEndpoint removes the endpoints of the service at one of the
// addresses that Aether can name (protocol http, any port: Aether names an
// endpoint by its service and address only) and the caller could have registered
// through Aether's API. When the caller's node is known (the registrar
// authorizes writes), those are that node's own, in any cluster the registrar
// accepts; otherwise every one in the registrar's own cluster. It reads the
// snapshot, so it is a read first: the reader policy and readiness apply (before
// the first full read the snapshot is empty, and an unregister would find
// nothing and answer OK). Matching nothing is not an error.
func (s *Service) UnregisterEndpoint(ctx context.Context, req *aetherregistrarv1.UnregisterEndpointRequest) (*aetherregistrarv1.UnregisterEndpointResponse, error) {
	svc, err := OurService(req.GetServiceName())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, serviceError("service_name", req.GetServiceName(), err))
	}
	ips, err := parseIPs(req.GetIps())
	if err != nil {
		return nil, err
	}
	if err := s.reg.MayRead(ctx); err != nil {
		return nil, err
	}
	if err := s.reg.Ready(); err != nil {
		return nil, err
	}
	node := s.reg.CallerNode(ctx)
	eps, _ := s.reg.Endpoints(endpoint.Filter{Service: svc, Protocol: protocolHTTP})
	var ops []registry.Op
	for _, e := range eps {
		if _, ok := ips[e.Address]; !ok {
			continue
		}
		// Any cluster a registration may name; with the caller's node known, only
		// that node's own endpoints.
		if !s.reg.Accepts(e.Cluster) || node != "" && e.Node != node {
			continue
		}
		ops = append(ops, registry.Op{Kind: registry.OpUnregister, Endpoint: e.Key().Endpoint()})
	}
	if len(ops) > 0 { // removing what is not registered is not an error
		if err := s.reg.Write(ctx, ops); err != nil {
			return nil, err
		}
	}
	return &aetherregistrarv1.UnregisterEndpointResponse{}, nil
}

// parseIPs reads UnregisterEndpoint's addresses into the canonical forms the
// registrar stores.
func parseIPs(in []string) (map[string]struct{}, error) {
	if len(in) > maxIPs {
		return nil, status.Errorf(codes.InvalidArgument, "ips: %d addresses in one request, at most %d", len(in), maxIPs)
	}
	out := make(map[string]struct{}, len(in))
	for i, ip := range in {
		a, err := parseIP(ip)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ips[%d] %q: %v", i, ip, err)
		}
		out[a] = struct{}{}
	}
	return out, nil
}

// parseIP reads an IP address into its canonical form.
func parseIP(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("is required")
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("must be an IPv4 or IPv6 address")
	case a.Zone() != "":
		return "", fmt.Errorf("must not carry an IPv6 zone")
	}
	return a.String(), nil
}

// ListAllEndpoints lists the endpoints Aether can name (protocol http) by service;
// PROTOCOL_UNSPECIFIED is every protocol Aether can name, so the same.
func (s *Service) ListAllEndpoints(ctx context.Context, req *aetherregistrarv1.ListAllEndpointsRequest) (*aetherregistrarv1.ListAllEndpointsResponse, error) {
	p := req.GetProtocol()
	if p != aetherregistryv1.Service_PROTOCOL_UNSPECIFIED && p != aetherregistryv1.Service_HTTP {
		return nil, status.Errorf(codes.InvalidArgument, "protocol %d: must be PROTOCOL_UNSPECIFIED or HTTP", p)
	}
	if err := s.reg.MayRead(ctx); err != nil {
		return nil, err
	}
	if err := s.reg.Ready(); err != nil {
		return nil, err
	}
	eps, version := s.reg.Endpoints(endpoint.Filter{Protocol: protocolHTTP})
	resp := &aetherregistrarv1.ListAllEndpointsResponse{Services: map[string]*aetherregistrarv1.ServiceEndpoints{}, Version: version}
	for _, i := range endpoint.Order(eps) {
		e := eps[i]
		svc, _, ep, ok := FromEndpoint(e)
		if !ok {
			continue
		}
		group := resp.Services[svc]
		if group == nil {
			group = &aetherregistrarv1.ServiceEndpoints{}
			resp.Services[svc] = group
		}
		group.Endpoints = append(group.Endpoints, ep)
	}
	return resp, nil
}

// ListAllConfig returns no projections: Switchboard carries no service config.
func (s *Service) ListAllConfig(ctx context.Context, _ *aetherregistrarv1.ListAllConfigRequest) (*aetherregistrarv1.ListAllConfigResponse, error) {
	if err := s.reg.MayRead(ctx); err != nil {
		return nil, err
	}
	return &aetherregistrarv1.ListAllConfigResponse{}, nil
}

// WatchEndpoints runs one of the registrar's watchers, unscoped, and translates
// what it sends (translate.go). Unscoped because the service catalog reaches every
// watcher whatever its filter: the filter is applied here.
func (s *Service) WatchEndpoints(req *aetherregistrarv1.WatchEndpointsRequest, stream grpc.ServerStreamingServer[aetherregistrarv1.WatchEndpointsResponse]) error {
	filter, err := filterOf(req.GetFilter())
	if err != nil {
		return err
	}
	t := newTranslator(filter, s.reg.Catalog, stream.Send)
	ours := &registrarv1.WatchEndpointsRequest{
		ClusterName: req.GetClusterName(),
		NodeName:    req.GetNodeName(),
		LastVersion: req.GetLastVersion(),
	}
	return s.reg.Watch(stream, ours, t.handle)
}

// filterOf reads a watch's filter: nil for every service, else the set of our
// names of its services (empty for none).
func filterOf(f *aetherregistrarv1.ServiceFilter) (map[string]struct{}, error) {
	if f == nil {
		return nil, nil
	}
	names := f.GetServices()
	if len(names) > maxServices {
		return nil, status.Errorf(codes.InvalidArgument, "filter.services: %d services in one watch, at most %d", len(names), maxServices)
	}
	set := make(map[string]struct{}, len(names))
	for i, n := range names {
		ours, err := OurService(n)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, serviceError(fmt.Sprintf("filter.services[%d]", i), n, err))
		}
		set[ours] = struct{}{}
	}
	return set, nil
}

// sortedNames returns Aether's names of the services counts holds, sorted: the
// catalog is replayed in a stable order.
func sortedNames(counts map[string]int) []string {
	out := make([]string, 0, len(counts))
	for svc, n := range counts {
		if n > 0 {
			out = append(out, AetherService(svc))
		}
	}
	slices.Sort(out)
	return out
}
