package wire

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// listing10k is a whole-registry listing as the registrar sends it: 10,000
// endpoints over 100 services.
func listing10k(b *testing.B) []byte {
	resp := &registrarv1.ListAllEndpointsResponse{Version: "1.2"}
	for i := range 10000 {
		e := endpoint.Endpoint{Cluster: "east", Service: fmt.Sprintf("svc%d", i%100), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Node: fmt.Sprintf("node-%d", i%500), Priority: 1}
		resp.Endpoints = append(resp.Endpoints, e.ToProto())
	}
	raw, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// The hand decoder against protobuf's generated one followed by the conversion
// every caller of the generated client needs.
func BenchmarkDecodeListing10k(b *testing.B) {
	raw := listing10k(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeListing(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGeneratedListing10k(b *testing.B) {
	raw := listing10k(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := referenceListing(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// vtprotobuf's generated decoder, from a pooled message, and the same conversion.
func BenchmarkVTListing10k(b *testing.B) {
	raw := listing10k(b)
	b.ReportAllocs()
	for b.Loop() {
		resp := registrarv1.ListAllEndpointsResponseFromVTPool()
		if err := resp.UnmarshalVT(raw); err != nil {
			b.Fatal(err)
		}
		eps := make([]endpoint.Endpoint, 0, len(resp.Endpoints))
		for _, p := range resp.Endpoints {
			e, err := endpoint.FromProtoUnchecked(p)
			if err != nil {
				b.Fatal(err)
			}
			eps = append(eps, e)
		}
		if len(eps) != len(resp.Endpoints) || resp.GetVersion() == "" {
			b.Fatal("short listing")
		}
		resp.ReturnToVTPool()
	}
}
