package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// rawCodec hands received messages over undecoded; requests go out as protobuf.
type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (c rawCodec) Name() string                           { return "proto" }
func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch t := v.(type) {
	case *head:
		*t = headOf(data[0].ReadOnlyData(), data.Len())
		return nil
	case *visit:
		return readIn(data, func(b []byte) error { return eachEvent(b, *t) })
	case *readMsg:
		return readIn(data, *t)
	}
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

// readIn hands fn the message: a small one where it is in gRPC's buffer.
func readIn(data mem.BufferSlice, fn func([]byte) error) error {
	if len(data) == 1 {
		return fn(data[0].ReadOnlyData())
	}
	return fn(data.Materialize())
}

// readMsg is a receive target that reads a message in gRPC's buffers, whole.
type readMsg func([]byte) error

// visit is a receive target that reads a message in gRPC's buffers, handing fn
// each event (a BATCH's one by one) before RecvMsg returns: a watcher that keeps
// nothing of what it reads makes no garbage of it, and its garbage collections
// would be part of the fan-out's tail.
type visit func(event)

// head is what a watcher that only waits for the end of a snapshot reads of a
// message: its size and first bytes, without copying the rest out of gRPC's
// buffers (a storm's watchers would spend more copying 64 KiB chunks than the
// registrar spends sending them).
type head struct {
	size, n int
	start   [2]byte
}

// headOf is the head of a message of size bytes that starts with b.
func headOf(b []byte, size int) head {
	h := head{size: size}
	h.n = copy(h.start[:], b)
	return h
}

// is reports whether the message is an event of type t: it starts with the type
// field (FULL_SNAPSHOT, the zero value, leaves it out) holding t.
func (h *head) is(t registrarv1.EndpointEvent_EventType) bool {
	return h.n == 2 && h.start[0] == byte(protowire.EncodeTag(wire.EventFieldType, protowire.VarintType)) && h.start[1] == byte(t)
}

var raw = grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")})

// event is what a benchmark watcher reads of an EndpointEvent.
type event struct {
	typ     registrarv1.EndpointEvent_EventType
	address []byte   // of the endpoint of a change, in the message
	items   int      // endpoints in a FULL_SNAPSHOT part
	inner   [][]byte // the events of a BATCH, undecoded
}

// parse reads the type, the changed endpoint's address and the snapshot item count.
func parse(b []byte) (event, error) {
	var ev event
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ev, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == wire.EventFieldType && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			ev.typ, b = registrarv1.EndpointEvent_EventType(v), b[m:]
		case num == wire.EventFieldEndpoint && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			ev.address, b = addressOf(v), b[m:]
		case num == wire.EventFieldEndpoints && typ == protowire.BytesType:
			_, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			ev.items, b = ev.items+1, b[m:]
		case num == wire.EventFieldCompressed && typ == protowire.BytesType: // a compressed part: its items count too
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			n, err := compressedItems(v)
			if err != nil {
				return ev, err
			}
			ev.items, b = ev.items+n, b[m:]
		case num == wire.EventFieldEvents && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			ev.inner, b = append(ev.inner, v), b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return ev, protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return ev, nil
}

// eachEvent calls fn with the event msg holds, or with each event of a BATCH in
// order: a watcher counts every event, however it came.
func eachEvent(msg []byte, fn func(event)) error {
	ev, err := parse(msg)
	if err != nil || ev.typ != registrarv1.EndpointEvent_BATCH {
		fn(ev)
		return err
	}
	for _, b := range ev.inner {
		in, err := parse(b)
		if err != nil {
			return err
		}
		fn(in)
	}
	return nil
}

func addressOf(ep []byte) []byte { return wire.FindField(ep, wire.EndpointFieldAddress) }

// dialN opens n connections to addr, with the transport's -window and -buffer.
func dialN(addr string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		c, err := grpc.NewClient(addr, append(transport.dialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil, err
		}
		c.Connect()
		conns[i] = c
	}
	return conns, nil
}

// childConns is how a watcher child starts: n connections to target and the context its
// streams run in; done cancels the context and closes the connections.
func childConns(target string, n int) ([]*grpc.ClientConn, context.Context, func(), error) {
	cs, err := dialN(target, n)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return cs, ctx, func() { cancel(); closeAll(cs) }, nil
}

func closeAll(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// rawWatch opens a watch stream read with rawCodec, resuming from token if set;
// it accepts batches unless -batches=false.
func rawWatch(ctx context.Context, conn *grpc.ClientConn, node, token string) (grpc.ServerStreamingClient[registrarv1.EndpointEvent], error) {
	req := &registrarv1.WatchEndpointsRequest{NodeName: node, LastVersion: token, AcceptBatches: transport.batches, AcceptCompressed: transport.compressed}
	st, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, req, raw)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	return st, nil
}

// untilComplete reads a stream's initial phase (or a scoped stream's next snapshot)
// and returns the endpoints it held.
func untilComplete(st grpc.ClientStream) (int, error) {
	items := 0
	for {
		var b []byte
		if err := st.RecvMsg(&b); err != nil {
			return items, err
		}
		ev, err := parse(b)
		if err != nil {
			return items, err
		}
		if ev.typ == registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
			return items, nil
		}
		items += ev.items
	}
}

// initialBytes counts the bytes of the messages untilCompleteFast read, in this
// process: the storm's throughput.
var initialBytes atomic.Int64

// untilCompleteFast reads a stream's initial phase without counting what it held:
// it reads only each message's head (its size and type).
func untilCompleteFast(st grpc.ClientStream) error {
	for {
		var h head
		if err := st.RecvMsg(&h); err != nil {
			return err
		}
		initialBytes.Add(int64(h.size))
		if h.is(registrarv1.EndpointEvent_SNAPSHOT_COMPLETE) {
			return nil
		}
	}
}

var zstdDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))

// compressedItems decompresses one frame of a compressed snapshot part and counts
// the endpoints in it, as a receiver that takes the part must decompress it.
func compressedItems(frame []byte) (int, error) {
	raw, err := zstdDecoder.DecodeAll(frame, nil)
	if err != nil {
		return 0, err
	}
	inner, err := parse(raw)
	return inner.items, err
}
