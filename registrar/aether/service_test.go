package aether

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
)

// fakeRegistrar is a Registrar over a fixed list of endpoints that records the
// writes it is asked for.
type fakeRegistrar struct {
	node    string   // CallerNode
	also    []string // clusters accepted beside east
	eps     []endpoint.Endpoint
	ready   error
	mayRead error
	writes  [][]registry.Op
	reads   int // Endpoints calls
}

func (f *fakeRegistrar) Cluster() string                   { return "east" }
func (f *fakeRegistrar) CallerNode(context.Context) string { return f.node }
func (f *fakeRegistrar) MayRead(context.Context) error     { return f.mayRead }
func (f *fakeRegistrar) Ready() error                      { return f.ready }
func (f *fakeRegistrar) Accepts(cluster string) bool {
	return cluster == "east" || slices.Contains(f.also, cluster)
}
func (f *fakeRegistrar) Write(_ context.Context, ops []registry.Op) error {
	f.writes = append(f.writes, ops)
	return nil
}

func (f *fakeRegistrar) Endpoints(fl endpoint.Filter) ([]endpoint.Endpoint, string) {
	f.reads++
	var out []endpoint.Endpoint
	for _, e := range f.eps {
		if fl.Normalize().Match(e) {
			out = append(out, e)
		}
	}
	return out, "v1"
}

func (f *fakeRegistrar) Catalog(string, func(string) bool) (map[string]int, bool) { return nil, false }
func (f *fakeRegistrar) Watch(grpc.ServerStream, *registrarv1.WatchEndpointsRequest, func([]byte) error) error {
	return nil
}

// written is the keys of every op written, sorted.
func (f *fakeRegistrar) written() []string {
	var out []string
	for _, ops := range f.writes {
		for _, op := range ops {
			out = append(out, op.Kind.String()+" "+op.Endpoint.Key().String())
		}
	}
	slices.Sort(out)
	return out
}

func unregister(f *fakeRegistrar, svc string, ips ...string) error {
	_, err := (&Service{reg: f}).UnregisterEndpoint(context.Background(), &aetherregistrarv1.UnregisterEndpointRequest{ServiceName: svc, Ips: ips})
	return err
}

// endpoints at one shared address: node-a's and node-b's (bridge networking, two
// ports), a tcp one Aether cannot see, one of an accepted cluster by node-a and
// one by node-b, one of a cluster this registrar does not accept, and another
// service's.
func sharedAddress() []endpoint.Endpoint {
	e := func(cluster, svc, protocol string, port int, node string) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: cluster, Service: svc, Protocol: protocol, Address: "172.17.0.2", Port: port, Priority: 1, Node: node}
	}
	return []endpoint.Endpoint{
		e("east", "web", "http", 80, "node-a"),
		e("east", "web", "http", 81, "node-b"),
		e("east", "web", "tcp", 9000, "node-a"),
		e("west", "web", "http", 82, "node-a"),
		e("west", "web", "http", 83, "node-b"),
		e("north", "web", "http", 84, "node-a"),
		e("east", "api", "http", 80, "node-a"),
	}
}

// With the caller's node known (write authorization on), an unregister removes
// that node's http endpoints of the service at the address, in this registrar's
// cluster and those it also accepts: never another node's, nor a protocol Aether
// cannot name.
func TestUnregisterRemovesOnlyTheCallersHTTPEndpoints(t *testing.T) {
	f := &fakeRegistrar{node: "node-a", also: []string{"west"}, eps: sharedAddress()}
	if err := unregister(f, "web", "172.17.0.2"); err != nil {
		t.Fatal(err)
	}
	want := []string{"unregister east/web/http/172.17.0.2:80", "unregister west/web/http/172.17.0.2:82"}
	if got := f.written(); !slices.Equal(got, want) {
		t.Fatalf("node-a's unregister wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Without write authorization the caller is not known: every http endpoint of the
// service at the address in this registrar's own cluster, whatever its node.
func TestUnregisterWithoutAuthorization(t *testing.T) {
	f := &fakeRegistrar{also: []string{"west"}, eps: sharedAddress()}
	if err := unregister(f, "web", "172.17.0.2"); err != nil {
		t.Fatal(err)
	}
	// Every cluster the registrar accepts, as a registration may name any of them
	// (west); not one it only watches (north).
	want := []string{"unregister east/web/http/172.17.0.2:80", "unregister east/web/http/172.17.0.2:81",
		"unregister west/web/http/172.17.0.2:82", "unregister west/web/http/172.17.0.2:83"}
	if got := f.written(); !slices.Equal(got, want) {
		t.Fatalf("the unregister wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// An address that matches nothing the caller may remove is OK and writes nothing.
func TestUnregisterNothingIsOK(t *testing.T) {
	f := &fakeRegistrar{node: "node-c", eps: sharedAddress()}
	if err := unregister(f, "web", "172.17.0.2", "10.9.9.9"); err != nil {
		t.Fatal(err)
	}
	if len(f.writes) != 0 {
		t.Fatalf("wrote %v, want nothing", f.written())
	}
}

// Before the registrar's first full read its snapshot is empty: an unregister
// would remove nothing and answer OK. It is Unavailable, as our reads are; a
// caller the policy's readers leave out is refused before the snapshot is read.
func TestUnregisterChecksReadinessAndReaders(t *testing.T) {
	f := &fakeRegistrar{eps: sharedAddress(), ready: status.Error(codes.Unavailable, "not ready")}
	if err := unregister(f, "web", "172.17.0.2"); status.Code(err) != codes.Unavailable || len(f.writes) != 0 {
		t.Fatalf("unregister before ready: %v, wrote %v; want Unavailable and nothing", err, f.written())
	}
	f = &fakeRegistrar{eps: sharedAddress(), mayRead: status.Error(codes.PermissionDenied, "not a reader")}
	if err := unregister(f, "web", "172.17.0.2"); status.Code(err) != codes.PermissionDenied || f.reads != 0 || len(f.writes) != 0 {
		t.Fatalf("unregister by a non-reader: %v, %d reads, wrote %v; want PermissionDenied, no read", err, f.reads, f.written())
	}
}

// Aether's namespace-qualified names reach ours as NAME__NS, through every call.
func TestServiceNamesThroughTheCalls(t *testing.T) {
	f := &fakeRegistrar{node: "node-a", eps: []endpoint.Endpoint{
		{Cluster: "east", Service: "web__shop", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1, Node: "node-a"},
		{Cluster: "east", Service: "api", Protocol: "http", Address: "10.0.0.2", Port: 80, Priority: 1},
	}}
	s := &Service{reg: f}
	ctx := context.Background()
	_, err := s.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: "shop/web", Protocol: aetherregistryv1.Service_HTTP,
		Endpoint: &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := unregister(f, "shop/web", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"register east/web__shop/http/10.0.0.3:0", "unregister east/web__shop/http/10.0.0.1:80"}
	if got := f.written(); !slices.Equal(got, want) {
		t.Fatalf("wrote %v, want %v", got, want)
	}
	list, err := s.ListAllEndpoints(ctx, &aetherregistrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range list.GetServices() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"api", "shop/web"}) {
		t.Fatalf("list keys %v, want [api shop/web]", keys)
	}
	set, err := filterOf(&aetherregistrarv1.ServiceFilter{Services: []string{"shop/web", "api"}})
	if _, ok := set["web__shop"]; err != nil || !ok || len(set) != 2 {
		t.Fatalf("filter: %v (%v), want web__shop and api", set, err)
	}

	// Bad names: InvalidArgument naming the field.
	for _, tc := range []struct{ name, field string }{{"Shop/web", "service_name"}, {"web__shop", "service_name"}, {"a/b/c", "service_name"}} {
		_, err := s.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: tc.name, Protocol: aetherregistryv1.Service_HTTP,
			Endpoint: &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.3"}})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
			t.Errorf("register %q: %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
		if err := unregister(f, tc.name, "10.0.0.1"); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
			t.Errorf("unregister %q: %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	_, err = filterOf(&aetherregistrarv1.ServiceFilter{Services: []string{"api", "shop/Web"}})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "filter.services[1]") {
		t.Fatalf("a bad filter: %v, want InvalidArgument naming filter.services[1]", err)
	}
}

// ListAllConfig answers no projections (Switchboard carries no service config),
// and a caller the policy's readers leave out is refused, as by the other reads.
func TestListAllConfig(t *testing.T) {
	ctx := context.Background()
	resp, err := (&Service{reg: &fakeRegistrar{eps: sharedAddress()}}).ListAllConfig(ctx, &aetherregistrarv1.ListAllConfigRequest{})
	if err != nil || resp == nil || len(resp.GetProjections()) != 0 {
		t.Fatalf("ListAllConfig: %v (%v), want an empty response", resp, err)
	}
	f := &fakeRegistrar{eps: sharedAddress(), mayRead: status.Error(codes.PermissionDenied, "not a reader")}
	if resp, err := (&Service{reg: f}).ListAllConfig(ctx, &aetherregistrarv1.ListAllConfigRequest{}); status.Code(err) != codes.PermissionDenied || resp != nil {
		t.Fatalf("ListAllConfig by a non-reader: %v, %v; want PermissionDenied and no response", resp, err)
	}
}

// ListAllEndpoints takes PROTOCOL_UNSPECIFIED and HTTP; a value the enum does not
// define is InvalidArgument naming protocol, before anything is read.
func TestListAllEndpointsProtocol(t *testing.T) {
	ctx := context.Background()
	for _, p := range []aetherregistryv1.Service_Protocol{aetherregistryv1.Service_PROTOCOL_UNSPECIFIED, aetherregistryv1.Service_HTTP} {
		f := &fakeRegistrar{eps: sharedAddress()}
		resp, err := (&Service{reg: f}).ListAllEndpoints(ctx, &aetherregistrarv1.ListAllEndpointsRequest{Protocol: p})
		if err != nil || len(resp.GetServices()["web"].GetEndpoints()) == 0 {
			t.Errorf("ListAllEndpoints(%v): %v (%v), want web's endpoints", p, resp, err)
		}
	}
	for _, p := range []aetherregistryv1.Service_Protocol{2, 99, -1} {
		f := &fakeRegistrar{eps: sharedAddress()}
		_, err := (&Service{reg: f}).ListAllEndpoints(ctx, &aetherregistrarv1.ListAllEndpointsRequest{Protocol: p})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "protocol") || f.reads != 0 {
			t.Errorf("ListAllEndpoints(protocol %d): %v after %d reads, want InvalidArgument naming protocol and no read", p, err, f.reads)
		}
	}
}
