package registrar

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// Field numbers of registrarv1.EndpointEvent, for the events assembled by hand below.
const (
	fieldType      = 1
	fieldEndpoint  = 4
	fieldVersion   = 5
	fieldEndpoints = 6
	fieldResumed   = 7
	fieldPersisted = 8
	fieldScopeID   = 9
	fieldEvents    = 10
	fieldZipped    = 11 // compressed
	fieldTrace     = 12 // traceparent
)

// An event is encoded once, when it happens, and the same bytes go to every watcher;
// a snapshot is encoded once per version and shared by every watcher that takes it.
// Encoding per watcher would cost the registrar a marshal per event per agent.

// marshalEndpoint returns the wire form of one endpoint.
func marshalEndpoint(e endpoint.Endpoint) []byte {
	// Deterministic: one endpoint has one wire form, in every process, so that
	// state digests (digest.go) agree across replicas.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ToProto())
	if err != nil {
		// Marshal fails only for invalid UTF-8 in a string field, which Validate and
		// every backend reject before an endpoint gets here.
		panic(fmt.Sprintf("registrar: marshal endpoint %s: %v", e.Key(), err))
	}
	return b
}

// encodeChange assembles an ADDED, UPDATED or REMOVED event. traceparent, the
// W3C trace context of the event's fan-out span (tracing.go), is written only when
// set: with tracing off an event's bytes are what they always were.
func encodeChange(t registrarv1.EndpointEvent_EventType, ep []byte, v token.Version, persisted uint64, traceparent string) []byte {
	// At least trackedCap: a paced watcher sends these very bytes in a buffer
	// whose writing gRPC reports (batch.go), which it does only past 1 KiB.
	out := make([]byte, 0, max(len(ep)+80+len(traceparent)+2, trackedCap))
	out = protowire.AppendTag(out, fieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(t))
	out = protowire.AppendTag(out, fieldEndpoint, protowire.BytesType)
	out = protowire.AppendBytes(out, ep)
	out = appendVersion(out, fieldVersion, v)
	out = appendVersion(out, fieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
	if traceparent != "" {
		out = protowire.AppendTag(out, fieldTrace, protowire.BytesType)
		out = protowire.AppendString(out, traceparent)
	}
	return out
}

// encodeComplete assembles a SNAPSHOT_COMPLETE event.
func encodeComplete(v token.Version, resumed bool, persisted, scopeID uint64) []byte {
	out := make([]byte, 0, 80)
	out = protowire.AppendTag(out, fieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(registrarv1.EndpointEvent_SNAPSHOT_COMPLETE))
	out = appendVersion(out, fieldVersion, v)
	if resumed {
		out = protowire.AppendTag(out, fieldResumed, protowire.VarintType)
		out = protowire.AppendVarint(out, 1)
	}
	if scopeID != 0 {
		out = protowire.AppendTag(out, fieldScopeID, protowire.VarintType)
		out = protowire.AppendVarint(out, scopeID)
	}
	return appendVersion(out, fieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
}

// encodeProgress assembles a PROGRESS event: the frontier moved with no change.
func encodeProgress(v token.Version, persisted uint64) []byte {
	out := make([]byte, 0, 80)
	out = protowire.AppendTag(out, fieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(registrarv1.EndpointEvent_PROGRESS))
	out = appendVersion(out, fieldVersion, v)
	return appendVersion(out, fieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
}

func appendVersion(out []byte, field protowire.Number, v token.Version) []byte {
	out = protowire.AppendTag(out, field, protowire.BytesType)
	return protowire.AppendString(out, v.String())
}

// appendSnapshotItem appends one endpoint to a FULL_SNAPSHOT chunk. FULL_SNAPSHOT is
// the enum's zero value, which proto3 leaves out, so a chunk is just its items.
func appendSnapshotItem(chunk, ep []byte) []byte {
	chunk = protowire.AppendTag(chunk, fieldEndpoints, protowire.BytesType)
	return protowire.AppendBytes(chunk, ep)
}

// snapshotItemSize is the encoded size of one chunk item.
func snapshotItemSize(ep []byte) int {
	return protowire.SizeTag(fieldEndpoints) + protowire.SizeBytes(len(ep))
}

// batchHeaderSize is the encoded size of a BATCH's type, which starts it.
var batchHeaderSize = len(appendBatchHeader(nil))

func appendBatchHeader(out []byte) []byte {
	out = protowire.AppendTag(out, fieldType, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(registrarv1.EndpointEvent_BATCH))
}

// appendBatchItem appends one encoded event to a BATCH: as a field of the BATCH,
// the event's own bytes, unchanged.
func appendBatchItem(out, ev []byte) []byte {
	out = protowire.AppendTag(out, fieldEvents, protowire.BytesType)
	return protowire.AppendBytes(out, ev)
}

// batchItemSize is the encoded size of one event in a BATCH.
func batchItemSize(ev []byte) int {
	return protowire.SizeTag(fieldEvents) + protowire.SizeBytes(len(ev))
}

// encoded is a message already in wire form; the codec sends its bytes as they are.
type encoded []byte

// shared is a message in wire form sent to many streams (an event, a snapshot
// chunk): its buffer list is made once, so that a send allocates nothing. gRPC
// only reads the list, and a SliceBuffer's Free does nothing.
// raw is the same bytes, for a paced watcher's tracked send of them (batch.go).
type shared struct {
	data mem.BufferSlice
	raw  []byte
}

func share(b []byte) *shared { return &shared{data: mem.BufferSlice{mem.SliceBuffer(b)}, raw: b} }

// bytes is the message's wire form.
func (m *shared) bytes() []byte { return m.raw }

// codec is the server's gRPC codec: the proto codec, except that pre-encoded events
// are written without a second marshal. It is forced on the server only; clients
// decode with the ordinary proto codec.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*shared); ok {
		return m.data, nil
	}
	if b, ok := v.(mem.Buffer); ok {
		// A paced message (batch.go), in a buffer of its own: SendMsg frees it once
		// the transport holds its reference, and the transport once it has written it.
		return mem.BufferSlice{b}, nil
	}
	if e, ok := v.(encoded); ok {
		// SliceBuffer's Free is a no-op: the bytes are shared and never recycled.
		return mem.BufferSlice{mem.SliceBuffer(e)}, nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal decodes a request; invalid UTF-8 becomes an InvalidArgument naming the
// field (with the service registered through rpcinput.Service).
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if b, ok := v.(*[]byte); ok {
		// A watch stream's request, taken undecoded: the handler decodes it itself
		// (decodeWatchRequest), a few frames above gRPC's instead of deep inside its
		// receive path, so the stream's goroutine keeps its smallest stack.
		*b = data.Materialize()
		return nil
	}
	return rpcinput.Unmarshal(c.proto, data, v)
}

func (c codec) Name() string { return "proto" }

// watchRequest is a registrarv1.WatchEndpointsRequest, decoded by hand into a
// value: the watch handlers decode their request on the stream's goroutine, and a
// proto message allocated there costs that goroutine stack (see watcher).
type watchRequest struct {
	clusterName, nodeName, lastVersion string
	services                           []string
	scopeID                            uint64
	allServices, acceptBatches         bool
	acceptCompressed                   bool
}

func (q watchRequest) GetClusterName() string    { return q.clusterName }
func (q watchRequest) GetNodeName() string       { return q.nodeName }
func (q watchRequest) GetLastVersion() string    { return q.lastVersion }
func (q watchRequest) GetServices() []string     { return q.services }
func (q watchRequest) GetScopeId() uint64        { return q.scopeID }
func (q watchRequest) GetAllServices() bool      { return q.allServices }
func (q watchRequest) GetAcceptBatches() bool    { return q.acceptBatches }
func (q watchRequest) GetAcceptCompressed() bool { return q.acceptCompressed }

// Field numbers of registrarv1.WatchEndpointsRequest.
const (
	fieldReqCluster     = 1
	fieldReqNode        = 2
	fieldReqLastVersion = 3
	fieldReqServices    = 4
	fieldReqScopeID     = 5
	fieldReqAll         = 6
	fieldReqBatches     = 7
	fieldReqCompressed  = 8
)

// decodeWatchRequest decodes a WatchEndpointsRequest as proto.Unmarshal would:
// unknown fields, and known ones of another wire type, are skipped; malformed
// input is an error. A string that is not valid UTF-8 is an InvalidArgument
// naming the field, as internal/rpcinput makes it for every other request.
func decodeWatchRequest(b []byte) (watchRequest, error) {
	var q watchRequest
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return q, badRequest(protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber { // ConsumeTag checks only the low bound
			return q, badRequest(fmt.Errorf("field number %d out of range", num))
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num >= fieldReqCluster && num <= fieldReqServices:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return q, badRequest(protowire.ParseError(m))
			}
			b = b[m:]
			if !utf8.Valid(v) {
				return q, invalidUTF8(num, len(q.services))
			}
			switch num {
			case fieldReqCluster:
				q.clusterName = string(v)
			case fieldReqNode:
				q.nodeName = string(v)
			case fieldReqLastVersion:
				q.lastVersion = string(v)
			default:
				q.services = append(q.services, string(v))
			}
		case typ == protowire.VarintType && num >= fieldReqScopeID && num <= fieldReqCompressed:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return q, badRequest(protowire.ParseError(m))
			}
			b = b[m:]
			switch num {
			case fieldReqScopeID:
				q.scopeID = v
			case fieldReqAll:
				q.allServices = v != 0
			case fieldReqBatches:
				q.acceptBatches = v != 0
			default:
				q.acceptCompressed = v != 0
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return q, badRequest(protowire.ParseError(m))
			}
			b = b[m:]
		}
	}
	return q, nil
}

func badRequest(err error) error {
	return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
}

func invalidUTF8(num protowire.Number, services int) error {
	name := map[protowire.Number]string{fieldReqCluster: "cluster_name", fieldReqNode: "node_name", fieldReqLastVersion: "last_version"}[num]
	if num == fieldReqServices {
		name = fmt.Sprintf("services[%d]", services)
	}
	return status.Error(codes.InvalidArgument, name+": invalid UTF-8")
}
