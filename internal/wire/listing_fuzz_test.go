package wire

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
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
		Ttl: durationpb.New(90 * time.Second), InstanceId: "abc", Region: "eu-west-1", Zone: "eu-west-1b",
		Health: registryv1.Health_HEALTH_DRAINING}
	newer := &registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.2", Health: 9}
	never := &registryv1.Endpoint{Cluster: "west", Service: "db", Protocol: "tcp", Address: "2001:DB8::1", Port: 5432, TtlNever: true,
		Ttl: &durationpb.Duration{Seconds: -1}}
	for _, resp := range []*registrarv1.ListAllEndpointsResponse{
		{Version: "1.2", Endpoints: []*registryv1.Endpoint{full, never, newer}},
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
	// An address sent twice: the last counts, but each must be valid UTF-8.
	f.Add([]byte{0x0a, 0x07, 0x22, 0x01, 0xff, 0x22, 0x02, 0x31, 0x32})
	f.Add([]byte{0x0a, 0x07, 0x22, 0x02, 0x31, 0x32, 0x22, 0x01, 0x31})
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff}) // cluster not UTF-8
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})       // cluster as a varint: unknown
	f.Fuzz(func(t *testing.T, b []byte) {
		got, version, err := DecodeListing(b)
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

// A listing large enough to be decoded in parts reads as one decoded whole: every
// endpoint in its place (those without an address too), the last version kept, an
// earlier listing untouched by the decoders it returned to the pool, and an error
// in a later part reported with the endpoint's index in the whole listing.
func TestDecodeListingInParts(t *testing.T) {
	resp := &registrarv1.ListAllEndpointsResponse{Version: "first"}
	for i := range 3*parallelFrom + 7 {
		address := fmt.Sprintf("10.0.%d.%d", i>>8&255, i&255)
		if i%11 == 0 {
			address = ""
		}
		resp.Endpoints = append(resp.Endpoints, &registryv1.Endpoint{Cluster: "east", Service: fmt.Sprintf("s%d", i%7),
			Protocol: "http", Address: address, Port: uint32(i), Node: fmt.Sprintf("n%d", i%13)})
	}
	raw, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	raw = protowire.AppendTag(raw, ListFieldVersion, protowire.BytesType)
	raw = protowire.AppendString(raw, "last")
	want, wantVersion, wantErr := referenceListing(raw)
	var first []endpoint.Endpoint
	for _, procs := range []int{1, 2, 4, 2} {
		old := runtime.GOMAXPROCS(procs)
		got, version, err := DecodeListing(raw)
		runtime.GOMAXPROCS(old)
		if err != nil || wantErr != nil || version != wantVersion || version != "last" || len(got) != len(want) {
			t.Fatalf("GOMAXPROCS %d: %d endpoints at %q (%v), protobuf %d at %q (%v)", procs, len(got), version, err, len(want), wantVersion, wantErr)
		}
		sameEndpoints(t, fmt.Sprintf("GOMAXPROCS %d", procs), got, want)
		if first == nil {
			first = got
		}
	}
	sameEndpoints(t, "the first listing, after three more", first, want)
	bad := len(resp.Endpoints) - 3
	resp.Endpoints[bad].Node = "\xff"
	raw = withRawNodes(t, resp)
	_, _, err = DecodeListing(raw)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("endpoint %d: node is not valid UTF-8", bad)) {
		t.Fatalf("a bad node in endpoint %d: error %v, want one naming the endpoint and the field", bad, err)
	}
}

func sameEndpoints(t *testing.T, what string, got, want []endpoint.Endpoint) {
	t.Helper()
	for i := range want {
		if !endpoint.Equal(got[i], want[i]) {
			t.Fatalf("%s: endpoint %d = %+v, protobuf %+v", what, i, got[i], want[i])
		}
	}
}

// withRawNodes encodes resp's endpoints as a listing, their nodes appended by hand:
// proto.Marshal refuses the invalid UTF-8 the test needs.
func withRawNodes(t *testing.T, resp *registrarv1.ListAllEndpointsResponse) []byte {
	t.Helper()
	var out []byte
	for _, e := range resp.GetEndpoints() {
		node := e.GetNode()
		e.Node = ""
		eb, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		e.Node = node
		eb = protowire.AppendTag(eb, EndpointFieldNode, protowire.BytesType)
		eb = protowire.AppendString(eb, node)
		out = protowire.AppendTag(out, ListFieldEndpoints, protowire.BytesType)
		out = protowire.AppendBytes(out, eb)
	}
	return out
}
