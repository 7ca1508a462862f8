package registrar

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
)

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
