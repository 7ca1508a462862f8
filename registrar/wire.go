package registrar

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// encoded is a message already in wire form; the codec sends its bytes as they are.
type encoded []byte

// shared is a message in wire form sent to many streams (an event, a snapshot
// chunk): its buffer list is made once, so that a send allocates nothing. gRPC
// only reads the list, and a SliceBuffer's Free does nothing.
// raw is the same bytes, for a paced watcher's tracked send of them (registrar/internal/hub/batch.go).
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
		// A paced message (registrar/internal/hub/batch.go), in a buffer of its own: SendMsg frees it once
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

// watchRequest is a WatchEndpointsRequest, decoded by hand into a value by
// internal/wire (see wire.WatchRequest).
type watchRequest = wire.WatchRequest

// decodeWatchRequest decodes a WatchEndpointsRequest as proto.Unmarshal would,
// with the errors gRPC's codec gives: a string that is not valid UTF-8 is an
// InvalidArgument naming the field, as internal/rpcinput makes it for every other
// request; malformed input is an Internal error.
func decodeWatchRequest(b []byte) (watchRequest, error) {
	q, err := wire.DecodeWatchRequest(b)
	if err == nil {
		return q, nil
	}
	var bad *wire.InvalidUTF8Error
	if errors.As(err, &bad) {
		return q, status.Error(codes.InvalidArgument, bad.Error())
	}
	return q, status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
}
