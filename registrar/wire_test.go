package registrar

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// The hand-assembled events must decode, with the ordinary protobuf library, to
// exactly the messages they stand for.
func TestHandEncodedEventsDecode(t *testing.T) {
	e := ep("east", "web", "2001:db8::1", 443)
	e.Annotations = map[string]string{"team": "edge"}
	e.TTL = endpoint.Never
	wire := marshalEndpoint(e)
	v := token.Version{Epoch: 0xabc, Seq: 42}

	var got registrarv1.EndpointEvent
	if err := proto.Unmarshal(encodeChange(registrarv1.EndpointEvent_ENDPOINT_UPDATED, wire, v, 40), &got); err != nil {
		t.Fatal(err)
	}
	want := &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_ENDPOINT_UPDATED, Endpoint: e.ToProto(),
		Version: v.String(), Persisted: token.Version{Epoch: 0xabc, Seq: 40}.String()}
	if !proto.Equal(&got, want) {
		t.Fatalf("change event decodes to %v, want %v", &got, want)
	}

	got.Reset()
	if err := proto.Unmarshal(encodeComplete(v, true, 42, 7), &got); err != nil {
		t.Fatal(err)
	}
	want = &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_SNAPSHOT_COMPLETE, Version: v.String(), Resumed: true, Persisted: v.String(), ScopeId: 7}
	if !proto.Equal(&got, want) {
		t.Fatalf("SNAPSHOT_COMPLETE decodes to %v, want %v", &got, want)
	}

	other := ep("west", "db", "10.0.0.1", 5432)
	chunk := appendSnapshotItem(appendSnapshotItem(nil, wire), marshalEndpoint(other))
	got.Reset()
	if err := proto.Unmarshal(chunk, &got); err != nil {
		t.Fatal(err)
	}
	want = &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_FULL_SNAPSHOT, Endpoints: []*registryv1.Endpoint{e.ToProto(), other.ToProto()}}
	if !proto.Equal(&got, want) {
		t.Fatalf("snapshot chunk decodes to %v, want %v", &got, want)
	}
	if n := snapshotItemSize(wire) + snapshotItemSize(marshalEndpoint(other)); n != len(chunk) {
		t.Fatalf("snapshotItemSize sums to %d, chunk is %d bytes", n, len(chunk))
	}
}
