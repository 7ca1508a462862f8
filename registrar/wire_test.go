package registrar

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// The hand-assembled events must decode, with the ordinary protobuf library, to
// exactly the messages they stand for.
func TestHandEncodedEventsDecode(t *testing.T) {
	e := ep("east", "web", "2001:db8::1", 443)
	e.Annotations = map[string]string{"team": "edge"}
	e.TTL = endpoint.Never
	ew := wire.MarshalEndpoint(e)
	v := token.Version{Epoch: 0xabc, Seq: 42}

	var got registrarv1.EndpointEvent
	plain := wire.EncodeChange(wire.EventType(registrarv1.EndpointEvent_ENDPOINT_UPDATED), ew, v, 40, "", hub.TrackedCap)
	if err := proto.Unmarshal(plain, &got); err != nil {
		t.Fatal(err)
	}
	want := &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_ENDPOINT_UPDATED, Endpoint: e.ToProto(),
		Version: v.String(), Persisted: token.Version{Epoch: 0xabc, Seq: 40}.String()}
	if !proto.Equal(&got, want) {
		t.Fatalf("change event decodes to %v, want %v", &got, want)
	}
	// Untraced, the event has no traceparent field at all: the bytes are what
	// protobuf writes for the message without it.
	if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(want); err != nil || string(b) != string(plain) {
		t.Fatalf("an untraced change is not the message without a traceparent (%v):\n%x\n%x", err, plain, b)
	}

	// Traced, it carries the traceparent as field 12, and nothing else changes.
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got.Reset()
	traced := wire.EncodeChange(wire.EventType(registrarv1.EndpointEvent_ENDPOINT_REMOVED), ew, v, 40, tp, hub.TrackedCap)
	if err := proto.Unmarshal(traced, &got); err != nil {
		t.Fatal(err)
	}
	want = &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_ENDPOINT_REMOVED, Endpoint: e.ToProto(),
		Version: v.String(), Persisted: token.Version{Epoch: 0xabc, Seq: 40}.String(), Traceparent: tp}
	if !proto.Equal(&got, want) {
		t.Fatalf("traced change event decodes to %v, want %v", &got, want)
	}
	if cap(traced) < hub.TrackedCap || len(traced) > cap(traced) {
		t.Fatalf("traced event: %d bytes in %d of capacity, want at least %d", len(traced), cap(traced), hub.TrackedCap)
	}

	got.Reset()
	if err := proto.Unmarshal(wire.EncodeComplete(v, true, 42, 7), &got); err != nil {
		t.Fatal(err)
	}
	want = &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_SNAPSHOT_COMPLETE, Version: v.String(), Resumed: true, Persisted: v.String(), ScopeId: 7}
	if !proto.Equal(&got, want) {
		t.Fatalf("SNAPSHOT_COMPLETE decodes to %v, want %v", &got, want)
	}

	other := ep("west", "db", "10.0.0.1", 5432)
	chunk := wire.AppendSnapshotItem(wire.AppendSnapshotItem(nil, ew), wire.MarshalEndpoint(other))
	got.Reset()
	if err := proto.Unmarshal(chunk, &got); err != nil {
		t.Fatal(err)
	}
	want = &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_FULL_SNAPSHOT, Endpoints: []*registryv1.Endpoint{e.ToProto(), other.ToProto()}}
	if !proto.Equal(&got, want) {
		t.Fatalf("snapshot chunk decodes to %v, want %v", &got, want)
	}
	if n := wire.SnapshotItemSize(ew) + wire.SnapshotItemSize(wire.MarshalEndpoint(other)); n != len(chunk) {
		t.Fatalf("snapshotItemSize sums to %d, chunk is %d bytes", n, len(chunk))
	}
}

// A watch request decoded by hand reads what proto.Unmarshal reads, skips what it
// skips, and names a string field holding invalid UTF-8 as rpcinput does.
func TestDecodeWatchRequest(t *testing.T) {
	in := &registrarv1.WatchEndpointsRequest{ClusterName: "east", NodeName: "n1", LastVersion: "00000000000000ab.7",
		Services: []string{"web", "db"}, ScopeId: 9}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.BytesType) // a field from a newer client
	b = protowire.AppendString(b, "ignored")
	b = protowire.AppendTag(b, wire.WatchFieldNode, protowire.VarintType) // a known field with another wire type
	b = protowire.AppendVarint(b, 1)
	q, err := decodeWatchRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := watchRequest{ClusterName: "east", NodeName: "n1", LastVersion: "00000000000000ab.7", Services: []string{"web", "db"}, ScopeID: 9}
	if !reflect.DeepEqual(q, want) {
		t.Fatalf("decoded %+v, want %+v", q, want)
	}
	all, _ := proto.Marshal(&registrarv1.WatchEndpointsRequest{AllServices: true})
	if q, err := decodeWatchRequest(all); err != nil || !q.AllServices {
		t.Fatalf("all_services: %+v, %v", q, err)
	}
	batches, _ := proto.Marshal(&registrarv1.WatchEndpointsRequest{AcceptBatches: true})
	if q, err := decodeWatchRequest(batches); err != nil || !q.AcceptBatches || q.AllServices {
		t.Fatalf("accept_batches: %+v, %v", q, err)
	}
	compressed, _ := proto.Marshal(&registrarv1.WatchEndpointsRequest{AcceptCompressed: true})
	if q, err := decodeWatchRequest(compressed); err != nil || !q.AcceptCompressed || q.AcceptBatches {
		t.Fatalf("accept_compressed: %+v, %v", q, err)
	}

	bad := protowire.AppendTag(nil, wire.WatchFieldServices, protowire.BytesType)
	bad = protowire.AppendString(bad, "web")
	bad = protowire.AppendTag(bad, wire.WatchFieldServices, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff})
	if _, err := decodeWatchRequest(bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "services[1]: invalid UTF-8") {
		t.Fatalf("invalid UTF-8: %v, want InvalidArgument naming services[1]", err)
	}
	if _, err := decodeWatchRequest([]byte{0x0a, 0x05, 'a'}); status.Code(err) != codes.Internal {
		t.Fatalf("truncated request: %v, want Internal", err)
	}
}
