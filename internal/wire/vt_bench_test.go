package wire

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// The registrar's encoding of one endpoint and of one change event, with
// protobuf's deterministic Marshal (what MarshalEndpoint does) against
// vtprotobuf's generated MarshalVT. MarshalVT does not sort map keys (v0.6.0 has
// no deterministic mode), so it could stand in only for endpoints with at most
// one annotation.

func benchEndpoint() endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "east", Service: "svc42", Protocol: "http", Address: "10.0.1.42", Port: 8080,
		Node: "node-42", Priority: 1, Weight: 10, Region: "eu-west-1", Zone: "eu-west-1b",
		Annotations: map[string]string{"team": "blue"}, TTL: endpoint.TTL(90 * time.Second)}
}

// protobuf's deterministic Marshal: MarshalEndpoint before vtprotobuf, and still
// for an endpoint with two annotations or more.
func BenchmarkEndpointMarshalDeterministic(b *testing.B) {
	e := benchEndpoint()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(e.ToProto()); err != nil {
			b.Fatal(err)
		}
	}
}

// MarshalEndpoint as it is: MarshalVT behind the checks that keep it deterministic.
func BenchmarkMarshalEndpoint(b *testing.B) {
	e := benchEndpoint()
	b.ReportAllocs()
	for b.Loop() {
		_ = MarshalEndpoint(e)
	}
}

func BenchmarkEndpointMarshalVT(b *testing.B) {
	e := benchEndpoint()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.ToProto().MarshalVT(); err != nil {
			b.Fatal(err)
		}
	}
}

// A change event: the hand encoder wraps the endpoint's wire form, which the
// registrar keeps anyway; the generated one marshals the whole event message.
func BenchmarkChangeEncodeHand(b *testing.B) {
	ep := MarshalEndpoint(benchEndpoint())
	v := token.Version{Epoch: 3, Seq: 123456}
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeChange(EndpointUpdated, ep, v, 123400, "", 0)
	}
}

func BenchmarkChangeEncodeVT(b *testing.B) {
	p := benchEndpoint().ToProto()
	v := token.Version{Epoch: 3, Seq: 123456}
	b.ReportAllocs()
	for b.Loop() {
		ev := registrarv1.EndpointEventFromVTPool()
		ev.Type, ev.Endpoint = registrarv1.EndpointEvent_ENDPOINT_UPDATED, p
		ev.Version, ev.Persisted = v.String(), token.Version{Epoch: v.Epoch, Seq: 123400}.String()
		if _, err := ev.MarshalVT(); err != nil {
			b.Fatal(err)
		}
		ev.Endpoint = nil // not the pool's
		ev.ReturnToVTPool()
	}
}

// What a watching client decodes (today with protobuf's generated Unmarshal,
// through gRPC's codec): a change event and a FULL_SNAPSHOT chunk of 500
// endpoints, each converted to endpoint.Endpoint, against vtprotobuf's UnmarshalVT.
func benchEvents(b *testing.B) (change, chunk []byte) {
	v := token.Version{Epoch: 3, Seq: 123456}
	change = EncodeChange(EndpointUpdated, MarshalEndpoint(benchEndpoint()), v, 123400, "", 0)
	for i := range 500 {
		e := benchEndpoint()
		e.Address = fmt.Sprintf("10.0.%d.%d", i>>8, i&255)
		chunk = AppendSnapshotItem(chunk, MarshalEndpoint(e))
	}
	return change, chunk
}

func decodeEvent(b *testing.B, raw []byte, unmarshal func([]byte, *registrarv1.EndpointEvent) error) {
	b.ReportAllocs()
	for b.Loop() {
		var ev registrarv1.EndpointEvent
		if err := unmarshal(raw, &ev); err != nil {
			b.Fatal(err)
		}
		for _, p := range append(ev.Endpoints, ev.Endpoint) {
			if p == nil {
				continue
			}
			if _, err := endpoint.FromProto(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func protoUnmarshal(raw []byte, ev *registrarv1.EndpointEvent) error { return proto.Unmarshal(raw, ev) }
func vtUnmarshal(raw []byte, ev *registrarv1.EndpointEvent) error    { return ev.UnmarshalVT(raw) }

func BenchmarkEventDecodeProto(b *testing.B) {
	change, _ := benchEvents(b)
	decodeEvent(b, change, protoUnmarshal)
}

func BenchmarkEventDecodeVT(b *testing.B) {
	change, _ := benchEvents(b)
	decodeEvent(b, change, vtUnmarshal)
}

func BenchmarkChunkDecodeProto(b *testing.B) {
	_, chunk := benchEvents(b)
	decodeEvent(b, chunk, protoUnmarshal)
}

func BenchmarkChunkDecodeVT(b *testing.B) {
	_, chunk := benchEvents(b)
	decodeEvent(b, chunk, vtUnmarshal)
}
