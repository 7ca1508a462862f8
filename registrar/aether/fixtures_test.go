package aether

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
)

// Byte fixtures of every Aether message, built field by field from the public
// field numbers (not by our encoder), decoded by our generated code: every field
// must land where Aether's agents put it.

// Wire builders: a string, a varint and a nested message field.
func s(n protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, n, protowire.BytesType), v)
}

func u(n protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
}

func m(n protowire.Number, parts ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), cat(parts...))
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// endpointFields is a ServiceEndpoint with every field set.
func endpointFields() []byte {
	return cat(
		s(1, "10.1.2.3"), s(2, "east"), u(3, 8080), u(4, 25),
		m(5, s(1, "eu-west-1"), s(2, "eu-west-1b")),
		m(6, s(1, "team"), s(2, "payments")), // a map entry: key 1, value 2
		m(7, s(1, "c0ffee"), s(2, "/var/run/netns/x")),
		m(8, s(1, "shop"), s(2, "web-7")),
	)
}

func endpointWant() *aetherregistryv1.ServiceEndpoint {
	return &aetherregistryv1.ServiceEndpoint{
		Ip: "10.1.2.3", ClusterName: "east", Port: 8080, Weight: 25,
		Locality:           &aetherregistryv1.ServiceEndpoint_Locality{Region: "eu-west-1", Zone: "eu-west-1b"},
		Metadata:           map[string]string{"team": "payments"},
		ContainerMetadata:  &aetherregistryv1.ServiceEndpoint_ContainerMetadata{ContainerId: "c0ffee", NetworkNamespace: "/var/run/netns/x"},
		KubernetesMetadata: &aetherregistryv1.ServiceEndpoint_KubernetesMetadata{Namespace: "shop", PodName: "web-7"},
	}
}

func projectionFields() []byte {
	anyMsg := cat(s(1, "type.googleapis.com/x.Config"), s(2, "\x08\x01"))
	route := cat(
		m(1, s(1, "/api"), s(2, "/exact"), s(3, "^/re$"), m(4, s(1, "x-env"), s(2, "prod"))),
		m(2, s(1, "shop/web"), s(2, "outbound|80||web"), u(3, 90)),
		m(3, u(1, 5), u(2, 500)),
		m(4, m(1, s(1, "a"), s(2, "1")), m(2, s(1, "b"), s(2, "2")), s(3, "c"), m(4, s(1, "d"), s(2, "3")), m(5, s(1, "e"), s(2, "4")), s(6, "f")),
		m(5, s(1, "https"), s(2, "example.org"), u(3, 443), u(4, 301), s(5, "ReplaceFullPath"), s(6, "/new"), u(7, 8443)),
		m(6, s(1, "rewritten.example.org"), s(2, "ReplacePrefixMatch"), s(3, "/v2")),
		m(7, s(1, "envoy.filters.http.ext"), m(2, anyMsg)),
	)
	return cat(s(1, "shop/web"), s(2, "west"), s(3, "42"), m(4, route), m(5, s(1, "envoy.filters.http.wasm")))
}

func projectionWant() *aetherregistryv1.ServiceConfigProjection {
	kv := func(n, v string) *aetherregistryv1.GammaHeaderKv {
		return &aetherregistryv1.GammaHeaderKv{Name: n, Value: v}
	}
	return &aetherregistryv1.ServiceConfigProjection{
		Service: "shop/web", OriginCluster: "west", Version: "42",
		Routes: []*aetherregistryv1.GammaRoute{{
			Matches: []*aetherregistryv1.GammaMatch{{Prefix: "/api", Exact: "/exact", Regex: "^/re$",
				Headers: []*aetherregistryv1.GammaHeaderMatch{{Name: "x-env", Value: "prod"}}}},
			Backends: []*aetherregistryv1.GammaBackend{{Service: "shop/web", Cluster: "outbound|80||web", Weight: 90}},
			Timeout:  &durationpb.Duration{Seconds: 5, Nanos: 500},
			HeaderMutation: &aetherregistryv1.GammaHeaderMutation{
				SetRequest: []*aetherregistryv1.GammaHeaderKv{kv("a", "1")}, AddRequest: []*aetherregistryv1.GammaHeaderKv{kv("b", "2")},
				RemoveRequest: []string{"c"}, SetResponse: []*aetherregistryv1.GammaHeaderKv{kv("d", "3")},
				AddResponse: []*aetherregistryv1.GammaHeaderKv{kv("e", "4")}, RemoveResponse: []string{"f"},
			},
			Redirect: &aetherregistryv1.GammaRedirect{Scheme: "https", Hostname: "example.org", Port: 443, StatusCode: 301,
				PathType: "ReplaceFullPath", PathValue: "/new", ListenerPort: 8443},
			UrlRewrite: &aetherregistryv1.GammaUrlRewrite{Hostname: "rewritten.example.org", PathType: "ReplacePrefixMatch", PathValue: "/v2"},
			ExtensionFilters: []*aetherregistryv1.ExtensionFilter{{Name: "envoy.filters.http.ext",
				Config: &anypb.Any{TypeUrl: "type.googleapis.com/x.Config", Value: []byte("\x08\x01")}}},
		}},
		ServiceFilter: &aetherregistryv1.ExtensionFilter{Name: "envoy.filters.http.wasm"},
	}
}

func TestAetherMessagesDecodeFromByteFixtures(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire []byte
		got  proto.Message // empty, decoded into
		want proto.Message
	}{
		{"ServiceEndpoint", endpointFields(), &aetherregistryv1.ServiceEndpoint{}, endpointWant()},
		{"Service", cat(s(1, "web"), u(2, 1), m(3, s(1, "10.1.2.3"), m(2, endpointFields()))), &aetherregistryv1.Service{},
			&aetherregistryv1.Service{Name: "web", Protocol: aetherregistryv1.Service_HTTP, Endpoints: map[string]*aetherregistryv1.ServiceEndpoint{"10.1.2.3": endpointWant()}}},
		{"ServiceConfigProjection", projectionFields(), &aetherregistryv1.ServiceConfigProjection{}, projectionWant()},
		{"RegisterEndpointRequest", cat(s(1, "web"), u(2, 1), m(3, endpointFields())), &aetherregistrarv1.RegisterEndpointRequest{},
			&aetherregistrarv1.RegisterEndpointRequest{ServiceName: "web", Protocol: aetherregistryv1.Service_HTTP, Endpoint: endpointWant()}},
		{"RegisterEndpointResponse", nil, &aetherregistrarv1.RegisterEndpointResponse{}, &aetherregistrarv1.RegisterEndpointResponse{}},
		{"UnregisterEndpointRequest", cat(s(1, "web"), s(2, "10.1.2.3"), s(2, "fd00::1")), &aetherregistrarv1.UnregisterEndpointRequest{},
			&aetherregistrarv1.UnregisterEndpointRequest{ServiceName: "web", Ips: []string{"10.1.2.3", "fd00::1"}}},
		{"UnregisterEndpointResponse", nil, &aetherregistrarv1.UnregisterEndpointResponse{}, &aetherregistrarv1.UnregisterEndpointResponse{}},
		{"WatchEndpointsRequest", cat(s(1, "east"), s(2, "node-1"), s(3, "v9"), m(4, s(1, "web"), s(1, "api")), s(5, "agent-abc12")),
			&aetherregistrarv1.WatchEndpointsRequest{}, &aetherregistrarv1.WatchEndpointsRequest{ClusterName: "east", NodeName: "node-1", LastVersion: "v9",
				Filter: &aetherregistrarv1.ServiceFilter{Services: []string{"web", "api"}}, Instance: "agent-abc12"}},
		{"WatchEndpointsRequest with an empty filter", m(4), &aetherregistrarv1.WatchEndpointsRequest{},
			&aetherregistrarv1.WatchEndpointsRequest{Filter: &aetherregistrarv1.ServiceFilter{}}},
		{"ServiceFilter", cat(s(1, "web")), &aetherregistrarv1.ServiceFilter{}, &aetherregistrarv1.ServiceFilter{Services: []string{"web"}}},
		{"WatchEndpointsResponse", cat(u(1, 2), s(2, "web"), u(3, 1), m(4, endpointFields()), s(5, "v10")), &aetherregistrarv1.WatchEndpointsResponse{},
			&aetherregistrarv1.WatchEndpointsResponse{Type: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED, ServiceName: "web",
				Protocol: aetherregistryv1.Service_HTTP, Endpoint: endpointWant(), Version: "v10"}},
		{"ListAllEndpointsRequest", u(1, 1), &aetherregistrarv1.ListAllEndpointsRequest{},
			&aetherregistrarv1.ListAllEndpointsRequest{Protocol: aetherregistryv1.Service_HTTP}},
		{"ListAllEndpointsResponse", cat(m(1, s(1, "web"), m(2, m(1, endpointFields()))), s(2, "v11")), &aetherregistrarv1.ListAllEndpointsResponse{},
			&aetherregistrarv1.ListAllEndpointsResponse{Services: map[string]*aetherregistrarv1.ServiceEndpoints{
				"web": {Endpoints: []*aetherregistryv1.ServiceEndpoint{endpointWant()}}}, Version: "v11"}},
		{"ServiceEndpoints", m(1, endpointFields()), &aetherregistrarv1.ServiceEndpoints{},
			&aetherregistrarv1.ServiceEndpoints{Endpoints: []*aetherregistryv1.ServiceEndpoint{endpointWant()}}},
		{"ListAllConfigRequest", nil, &aetherregistrarv1.ListAllConfigRequest{}, &aetherregistrarv1.ListAllConfigRequest{}},
		{"ListAllConfigResponse", m(1, projectionFields()), &aetherregistrarv1.ListAllConfigResponse{},
			&aetherregistrarv1.ListAllConfigResponse{Projections: []*aetherregistryv1.ServiceConfigProjection{projectionWant()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := proto.Unmarshal(tc.wire, tc.got); err != nil {
				t.Fatal(err)
			}
			// proto.Equal compares every field, and unknown fields too: a field
			// number of the fixture our message does not have would be one.
			if !proto.Equal(tc.got, tc.want) {
				t.Fatalf("decoded\n%v\nwant\n%v", tc.got, tc.want)
			}
		})
	}
}

// Every event type's number, as Aether's agents send and expect it.
func TestAetherEnumNumbers(t *testing.T) {
	for v, want := range map[int32]aetherregistrarv1.WatchEndpointsResponse_EventType{
		0: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_UNSPECIFIED, 1: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_FULL_SNAPSHOT,
		2: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED, 3: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_REMOVED,
		4: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_UPDATED, 5: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SNAPSHOT_COMPLETE,
		6: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_ADDED, 7: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_REMOVED,
	} {
		var got aetherregistrarv1.WatchEndpointsResponse
		if err := proto.Unmarshal(u(1, uint64(v)), &got); err != nil || got.GetType() != want {
			t.Errorf("type %d decodes as %v (%v), want %v", v, got.GetType(), err, want)
		}
	}
	var svc aetherregistryv1.Service
	if err := proto.Unmarshal(u(2, 1), &svc); err != nil || svc.GetProtocol() != aetherregistryv1.Service_HTTP {
		t.Errorf("protocol 1 decodes as %v (%v), want HTTP", svc.GetProtocol(), err)
	}
}
