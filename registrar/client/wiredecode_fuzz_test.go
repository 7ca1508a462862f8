package client

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// FuzzDecodeListing holds the hand decoder to protobuf's: whatever bytes arrive, it
// accepts exactly what proto.Unmarshal and endpoint.FromProtoUnchecked accept, and
// decodes the same endpoints and version.
func FuzzDecodeListing(f *testing.F) {
	full := &registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80,
		Node: "n1", Priority: 2, Weight: 3, Annotations: map[string]string{"team": "blue", "": "x"},
		Ttl: durationpb.New(90 * time.Second), InstanceId: "abc"}
	never := &registryv1.Endpoint{Cluster: "west", Service: "db", Protocol: "tcp", Address: "2001:DB8::1", Port: 5432, TtlNever: true,
		Ttl: &durationpb.Duration{Seconds: -1}}
	for _, resp := range []*registrarv1.ListAllEndpointsResponse{
		{Version: "1.2", Endpoints: []*registryv1.Endpoint{full, never}},
		{Endpoints: []*registryv1.Endpoint{{Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}}}},
		{Endpoints: []*registryv1.Endpoint{{Ttl: &durationpb.Duration{Nanos: 1}}, {Address: "::ffff:10.0.0.1"}}},
		{},
	} {
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x04, 0x52, 0x02, 0x08, 0x05, 0x0a, 0x04, 0x52, 0x02, 0x10, 0x07}) // ttl sent twice: merged
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff})                                           // cluster not UTF-8
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})                                                 // cluster as a varint: unknown
	f.Fuzz(func(t *testing.T, b []byte) {
		got, version, err := newWireDecoder().decodeListing(b)
		want, wantVersion, wantErr := referenceListing(b)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("hand decoder error %v, protobuf's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if version != wantVersion || len(got) != len(want) {
			t.Fatalf("hand decoder read %d endpoints at %q, protobuf %d at %q", len(got), version, len(want), wantVersion)
		}
		for i := range want {
			if !endpoint.Equal(got[i], want[i]) {
				t.Fatalf("endpoint %d: hand decoder %+v, protobuf %+v", i, got[i], want[i])
			}
		}
	})
}

func referenceListing(b []byte) ([]endpoint.Endpoint, string, error) {
	var resp registrarv1.ListAllEndpointsResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, "", err
	}
	var eps []endpoint.Endpoint
	for _, p := range resp.GetEndpoints() {
		e, err := endpoint.FromProtoUnchecked(p)
		if err != nil {
			return nil, "", err
		}
		eps = append(eps, e)
	}
	return eps, resp.GetVersion(), nil
}
