package xds

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// ClusterName is the xDS cluster (and EDS resource) of one Switchboard service and
// protocol. The protocol is always part of the name, so the name of a service's
// cluster does not change when the service gains a second protocol; "|" cannot occur
// in a Switchboard name, so the name splits back unambiguously.
func ClusterName(service, protocol string) string { return service + "|" + protocol }

// GRPCProtocol is the protocol a service's listener prefers when the service is
// registered with several protocols.
const GRPCProtocol = "grpc"

// connectTimeout bounds Envoy's upstream connection attempts; Envoy requires one.
const connectTimeout = 5 * time.Second

// resources is one complete set of xDS resources, each list sorted by name. The
// load assignments are those of a client that gave no locality; groups are kept to
// build them again for clients that did (forLocality).
type resources struct {
	clusters  []types.Resource
	endpoints []types.Resource
	routes    []types.Resource
	listeners []types.Resource
	groups    []group
	// versions are each type's version (see version), in typeURLs order: hashed
	// once per build, whatever the number of views served.
	versions []string
}

// group is the endpoints of one service and protocol.
type group struct {
	service, protocol string
	eps               []endpoint.Endpoint
}

// build turns endpoints into xDS resources: for each service and protocol a cluster
// and its load assignment; for each service a route configuration and an API
// listener named after the service, so that a gRPC client dialing xds:///SERVICE
// resolves. Endpoints without a port are skipped: nothing can connect to them.
func build(eps []endpoint.Endpoint) (resources, error) {
	groups := groupByServiceProtocol(eps)
	r := resources{groups: groups}
	protocols := map[string][]string{} // service → its protocols, sorted
	for _, g := range groups {
		name := ClusterName(g.service, g.protocol)
		r.clusters = append(r.clusters, makeCluster(name, g.protocol))
		r.endpoints = append(r.endpoints, makeLoadAssignment(name, g.eps, clientLocality{}))
		protocols[g.service] = append(protocols[g.service], g.protocol)
	}
	services := make([]string, 0, len(protocols))
	for s := range protocols {
		services = append(services, s)
	}
	slices.Sort(services)
	for _, s := range services {
		p, ok := listenerProtocol(protocols[s])
		if !ok {
			continue // ambiguous: several protocols, none of them gRPC
		}
		r.routes = append(r.routes, makeRoute(s, ClusterName(s, p)))
		l, err := makeListener(s)
		if err != nil {
			return resources{}, err
		}
		r.listeners = append(r.listeners, l)
	}
	if err := r.validate(); err != nil {
		return resources{}, err
	}
	if err := r.consistent(); err != nil {
		return resources{}, err
	}
	for _, t := range typeURLs {
		v, err := version(r.byType(t))
		if err != nil {
			return resources{}, err
		}
		r.versions = append(r.versions, v)
	}
	return r, nil
}

func groupByServiceProtocol(eps []endpoint.Endpoint) []group {
	idx := map[[2]string]int{}
	var groups []group
	for _, e := range eps {
		if e.Port <= 0 {
			continue
		}
		k := [2]string{e.Service, e.Protocol}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, group{service: e.Service, protocol: e.Protocol})
		}
		groups[i].eps = append(groups[i].eps, e)
	}
	slices.SortFunc(groups, func(a, b group) int {
		return cmp.Or(cmp.Compare(a.service, b.service), cmp.Compare(a.protocol, b.protocol))
	})
	return groups
}

// listenerProtocol picks the cluster a service's listener routes to: the gRPC one if
// there is one, else the only one.
func listenerProtocol(protocols []string) (string, bool) {
	if slices.Contains(protocols, GRPCProtocol) {
		return GRPCProtocol, true
	}
	if len(protocols) == 1 {
		return protocols[0], true
	}
	return "", false
}

// http2Protocols are the protocols whose upstreams speak HTTP/2: Envoy must be told,
// or it would send them HTTP/1.1.
var http2Protocols = map[string]bool{"grpc": true, "h2": true, "h2c": true, "http2": true}

func makeCluster(name, protocol string) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	if http2Protocols[protocol] {
		opts, _ := anypb.New(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
						Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
					},
				},
			},
		})
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	}
	return c
}

// adsSource points a dependent resource back at the ADS stream it came on; both
// Envoy with an ADS bootstrap and gRPC accept it.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// clientLocality is where an xDS client runs, from the locality of the node it sent
// (grpc-go sends its bootstrap's); the zero value for a client that did not say.
type clientLocality struct{ region, zone string }

func localityOf(n *corev3.Node) clientLocality {
	return clientLocality{region: n.GetLocality().GetRegion(), zone: n.GetLocality().GetZone()}
}

func (c clientLocality) known() bool { return c.region != "" || c.zone != "" }

// distance ranks an endpoint's place from the client's, as Istio's locality failover
// does: 0 in the client's zone, 1 in its region, 2 elsewhere. A zone is the same only
// within the same region (zone names need not be unique across regions), and an
// empty name never matches. Without a client locality every endpoint is at 0, so the
// priorities are the endpoints' own.
func (c clientLocality) distance(e endpoint.Endpoint) int {
	switch {
	case !c.known():
		return 0
	case c.zone != "" && e.Zone == c.zone && e.Region == c.region:
		return 0
	case c.region != "" && e.Region == c.region:
		return 1
	}
	return 2
}

// maxPriority is the highest xDS priority Envoy's validation accepts
// (LocalityLbEndpoints.priority ≤ 128): 129 priorities in all.
const maxPriority = 128

// rank is what orders an endpoint for a client: its Switchboard priority (1..255,
// lower preferred), then its distance from the client.
type rank struct{ priority, distance int }

// priorities maps each rank present onto an xDS priority: ordered by Switchboard
// priority, then distance, and dense from 0 over the ranks present, because xDS
// clients require priorities without gaps and treat 0 as the most preferred. Envoy
// takes no priority above maxPriority, and with a client locality there may be up
// to 255 × 3 ranks: beyond the cap, the least preferred ranks all share
// maxPriority, so the preferred ones keep their order.
func priorities(eps []endpoint.Endpoint, loc clientLocality) map[rank]uint32 {
	set := map[rank]uint32{}
	for _, e := range eps {
		set[rank{e.Priority, loc.distance(e)}] = 0
	}
	sorted := slices.SortedFunc(maps.Keys(set), func(a, b rank) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.distance, b.distance))
	})
	for i, r := range sorted {
		set[r] = uint32(min(i, maxPriority))
	}
	return set
}

// locality is one EDS locality: a place (region, zone, Switchboard cluster) at one
// xDS priority. A place may hold endpoints of several priorities, and so appear
// once per priority; xDS clients reject a locality twice at one priority.
type locality struct {
	priority              uint32
	region, zone, cluster string
}

func (l locality) compare(o locality) int {
	return cmp.Or(cmp.Compare(l.priority, o.priority), cmp.Compare(l.region, o.region),
		cmp.Compare(l.zone, o.zone), cmp.Compare(l.cluster, o.cluster))
}

// makeLoadAssignment groups a cluster's endpoints into localities: the endpoint's
// region and zone are the locality's, and its Switchboard cluster the sub-zone, so
// endpoints without a place keep one locality per Switchboard cluster. Priorities
// are those of priorities, for the client's locality. An endpoint's weight becomes
// its load-balancing weight (0, "no preference", becomes 1: xDS weights are at
// least 1), and a locality weighs the sum of its routable (healthy) endpoints, so
// that traffic splits across localities in proportion to the weights of the
// endpoints that take it: grpc-go uses a locality's weight as is and leaves the
// draining and unhealthy endpoints out only inside the locality. A locality without
// a routable endpoint weighs 1, the least xDS allows.
func makeLoadAssignment(name string, eps []endpoint.Endpoint, loc clientLocality) *endpointv3.ClusterLoadAssignment {
	eps = distinctAddresses(eps)
	prios := priorities(eps, loc)
	byLoc := map[locality]*endpointv3.LocalityLbEndpoints{}
	weights := map[locality]uint64{}
	var locs []locality
	for _, e := range eps {
		l := locality{prios[rank{e.Priority, loc.distance(e)}], e.Region, e.Zone, e.Cluster}
		lle := byLoc[l]
		if lle == nil {
			lle = &endpointv3.LocalityLbEndpoints{
				Locality: &corev3.Locality{Region: e.Region, Zone: e.Zone, SubZone: e.Cluster},
				Priority: l.priority,
			}
			byLoc[l] = lle
			locs = append(locs, l)
		}
		w := uint32(max(e.Weight, 1))
		lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, w))
		if e.Health.Routable() {
			weights[l] += uint64(w)
		}
	}
	slices.SortFunc(locs, locality.compare)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	for _, l := range locs {
		byLoc[l].LoadBalancingWeight = wrapperspb.UInt32(uint32(max(min(weights[l], math.MaxUint32), 1)))
		cla.Endpoints = append(cla.Endpoints, byLoc[l])
	}
	return cla
}

// distinctAddresses keeps one endpoint of each address and port: one address in
// two Switchboard clusters would be a duplicate, which clients reject. The copy kept
// is the most routable (healthy, then draining, then unhealthy), as DNS serves the
// healthy one, and among equals the first in endpoint.Compare's order (the first
// Switchboard cluster by name), whatever the order of eps; it takes the place of the
// address's first copy. It runs before the priorities are counted, so a left-out
// endpoint's priority leaves no gap.
func distinctAddresses(eps []endpoint.Endpoint) []endpoint.Endpoint {
	at := make(map[string]int, len(eps)) // address and port → index in out
	out := make([]endpoint.Endpoint, 0, len(eps))
	for _, e := range eps {
		hp := endpoint.HostPort(e.Address, e.Port)
		i, ok := at[hp]
		switch {
		case !ok:
			at[hp] = len(out)
			out = append(out, e)
		case preferredCopy(e, out[i]):
			out[i] = e
		}
	}
	return out
}

// preferredCopy reports whether a is to be served rather than b, of one address.
func preferredCopy(a, b endpoint.Endpoint) bool {
	if ra, rb := a.Health.Rank(), b.Health.Rank(); ra != rb {
		return ra < rb
	}
	return endpoint.Compare(a, b) < 0
}

// healthStatus is an endpoint's EDS health. Endpoints that take no new work stay in
// EDS with their status, as Envoy expects, rather than leaving it: Envoy and gRPC
// then route around them, and Envoy lets a draining one finish its requests. A
// state this agent does not know is unhealthy, as the endpoint model reads it.
func healthStatus(h endpoint.Health) corev3.HealthStatus {
	switch h {
	case endpoint.Healthy:
		return corev3.HealthStatus_HEALTHY
	case endpoint.Draining:
		return corev3.HealthStatus_DRAINING
	}
	return corev3.HealthStatus_UNHEALTHY
}

func lbEndpoint(e endpoint.Endpoint, weight uint32) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Protocol:      corev3.SocketAddress_TCP,
				Address:       e.Address,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(e.Port)},
			}}},
			Hostname: e.Node,
		}},
		HealthStatus:        healthStatus(e.Health),
		LoadBalancingWeight: wrapperspb.UInt32(weight),
	}
}

// makeRoute sends every request of a service's route configuration to cluster; an
// Envoy listener of the user's own can use it by name over RDS too.
func makeRoute(service, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: service,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    service,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
			}},
		}},
	}
}

// makeListener is the API listener a proxyless gRPC client asks for when it dials
// xds:///SERVICE: an HTTP connection manager that takes its routes over RDS.
func makeListener(service string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("xds: router filter: %w", err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: service,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: service,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("xds: listener %s: %w", service, err)
	}
	return &listenerv3.Listener{Name: service, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}, nil
}

// forLocality returns the load assignments for a client in loc, validated as build
// validates its own: they differ from r.endpoints only in their priorities.
func (r resources) forLocality(loc clientLocality) ([]types.Resource, error) {
	if !loc.known() {
		return r.endpoints, nil
	}
	out := make([]types.Resource, 0, len(r.groups))
	for _, g := range r.groups {
		cla := makeLoadAssignment(ClusterName(g.service, g.protocol), g.eps, loc)
		if err := cla.ValidateAll(); err != nil {
			return nil, fmt.Errorf("xds: load assignment %s for locality %q/%q is invalid: %w", cla.GetClusterName(), loc.region, loc.zone, err)
		}
		out = append(out, cla)
	}
	return out, nil
}

type validator interface{ ValidateAll() error }

// validate runs every resource's generated proto validation: a resource a proxy
// would reject must never be served.
func (r resources) validate() error {
	for _, list := range [][]types.Resource{r.clusters, r.endpoints, r.routes, r.listeners} {
		for _, res := range list {
			if err := res.(validator).ValidateAll(); err != nil {
				return fmt.Errorf("xds: %T %s is invalid: %w", res, resourceName(res), err)
			}
		}
	}
	return nil
}

func resourceName(res types.Resource) string {
	switch r := res.(type) {
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return "?"
}

// version is a content hash of one type's resources: a push happens only for the
// types whose resources changed, and equal content always has the same version.
func version(list []types.Resource) (string, error) {
	h := fnv.New64a()
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	for _, res := range list {
		var err error
		buf, err = opts.MarshalAppend(buf[:0], res)
		if err != nil {
			return "", fmt.Errorf("xds: hash %s: %w", resourceName(res), err)
		}
		h.Write(strconv.AppendInt(nil, int64(len(buf)), 10))
		h.Write(buf)
	}
	return strconv.FormatUint(h.Sum64(), 16), nil
}

// typeURLs lists the resource types served, in the order a client needs them.
var typeURLs = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

func (r resources) byType(typeURL string) []types.Resource {
	switch typeURL {
	case resource.ListenerType:
		return r.listeners
	case resource.RouteType:
		return r.routes
	case resource.ClusterType:
		return r.clusters
	case resource.EndpointType:
		return r.endpoints
	}
	return nil
}

// consistent checks that every name a resource refers to is served: a listener's
// route configuration, a route's cluster, a cluster's load assignment. A client
// that asks for a missing one waits for it, so a dangling name would hang it.
// go-control-plane's Snapshot.Consistent cannot do this: it does not look into API
// listeners.
func (r resources) consistent() error {
	names := func(list []types.Resource) map[string]bool {
		set := make(map[string]bool, len(list))
		for _, res := range list {
			set[resourceName(res)] = true
		}
		return set
	}
	routes, clusters, loads := names(r.routes), names(r.clusters), names(r.endpoints)
	for _, res := range r.listeners {
		hcm := &hcmv3.HttpConnectionManager{}
		if err := res.(*listenerv3.Listener).GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
			return fmt.Errorf("xds: listener %s: %w", resourceName(res), err)
		}
		if rc := hcm.GetRds().GetRouteConfigName(); !routes[rc] {
			return fmt.Errorf("xds: listener %s refers to route configuration %q, which is not served", resourceName(res), rc)
		}
	}
	for _, res := range r.routes {
		for _, vh := range res.(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				if c := rt.GetRoute().GetCluster(); !clusters[c] {
					return fmt.Errorf("xds: route configuration %s refers to cluster %q, which is not served", resourceName(res), c)
				}
			}
		}
	}
	for _, res := range r.clusters {
		if n := res.(*clusterv3.Cluster).GetEdsClusterConfig().GetServiceName(); !loads[n] {
			return fmt.Errorf("xds: cluster %s refers to load assignment %q, which is not served", resourceName(res), n)
		}
	}
	return nil
}
