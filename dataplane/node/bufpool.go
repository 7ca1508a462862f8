package node

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// Buffer sizes the pool keeps: 256 B to 16 MiB, every power of two.
const (
	minPoolExp = 8
	maxPoolExp = 24
)

// bufferPool is the buffer pool of the node's gRPC streams. gRPC's default pool clears
// a buffer's whole capacity on every Get, and its tiers jump from 32 KiB to 1 MiB, so
// each batch of a few dozen messages had a 1 MiB buffer cleared for it: a third of
// the node's CPU under load. This pool has a tier for every power of two and does not
// clear: gRPC writes every byte of a buffer it takes (a message marshalled into it, a
// frame read into it in full) before anything reads it.
type bufferPool struct {
	tiers [maxPoolExp + 1]sync.Pool
}

var sharedPool = &bufferPool{}

func (p *bufferPool) Get(n int) *[]byte {
	exp := bits.Len(uint(max(n, 1) - 1))
	exp = max(exp, minPoolExp)
	if exp > maxPoolExp {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.tiers[exp].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<exp)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	if b == nil {
		return // an empty frame's payload (framed.go)
	}
	c := cap(*b)
	exp := bits.Len(uint(c)) - 1
	if exp < minPoolExp || exp > maxPoolExp || c != 1<<exp {
		return // not one of ours
	}
	p.tiers[exp].Put(b)
}

// codec is gRPC's protobuf codec drawing its buffers from the node's pool: the
// default codec takes them from gRPC's default pool whatever the connection's own pool
// is, and so cleared a 1 MiB buffer for every batch marshalled or unmarshalled.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(wireMarshaler); ok {
		return marshalWire(w), nil
	}
	if m, ok := v.(vtMarshaler); ok {
		return marshalVT(m)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto: cannot marshal %T", v)
	}
	// UseCachedSize reuses the size just computed (gRPC's own codec does the same).
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := sharedPool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		sharedPool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, sharedPool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(wireUnmarshaler); ok {
		// A single buffer is taken over as it is (a reference more); several are
		// made one.
		err := w.decodeWire(data.MaterializeToBuffer(sharedPool))
		if errors.Is(err, wire.ErrMalformed) {
			// What a peer or a client reads: the frame is at fault, say so first.
			return fmt.Errorf("malformed frame: %w", err)
		}
		return err
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("proto: cannot unmarshal into %T", v)
	}
	if r, ok := m.(*nodev1.SubscribeResponse); ok {
		// A client's deliveries: decoded with a few allocations per response rather
		// than several per message, the payloads left in one copy of the response
		// (wire.go). The copy is of the response's size: the pooled buffers it was
		// read into, twice the size of a 1 KiB message's delivery, go back to the
		// pool, where keeping them would have made the pool miss once a delivery.
		b := data.Materialize()
		if decodeDelivery(b, r) {
			return nil
		}
		return proto.Unmarshal(b, m)
	}
	buf := data.MaterializeToBuffer(sharedPool)
	defer buf.Free()
	// proto.Unmarshal copies what it keeps, so the buffer can go back at once.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// vtMarshaler is a message with vtprotobuf's generated encoder (the node's messages,
// gen/switchboard/node/v1/node_vtproto.pb.go): a client's publish batch of 256 1 KiB
// messages in 13–15 µs against protobuf's 31–37 (BenchmarkPublishBatchMarshal). The
// node's messages have no maps, so its encoding is protobuf's deterministic one.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// marshalVT encodes m with vtprotobuf's encoder, which writes from the end of a
// buffer of exactly its size.
func marshalVT(m vtMarshaler) (mem.BufferSlice, error) {
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := sharedPool.Get(size)
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		sharedPool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, sharedPool)}, nil
}

// marshalWire encodes a message of the forwarding path (wire.go) into a pooled buffer.
func marshalWire(w wireMarshaler) mem.BufferSlice {
	size := w.wireSize()
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(w.appendWire(make([]byte, 0, size)))}
	}
	buf := sharedPool.Get(size)
	*buf = w.appendWire((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, sharedPool)}
}

// streamBufferSize is the size of a connection's write and read buffers: a full batch
// (maxBatchBytes) is written and read in one system call (gRPC's default, 32 KiB, took
// eight for one batch).
const streamBufferSize = 256 << 10

// Flow-control windows of the node's streams and connections, fixed: gRPC's default
// starts at 64 KiB and grows by estimating the bandwidth-delay product with pings,
// up to 16 MiB; a fixed window of that order spares the pings and the ramp-up.
const (
	streamWindow = 8 << 20
	connWindow   = 16 << 20
)

// ClientOptions are the dial options a client of the node's API (or of its links)
// should use: the node's buffer pool and codec, its buffer sizes and windows.
func ClientOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(sharedPool),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})),
		grpc.WithWriteBufferSize(streamBufferSize), grpc.WithReadBufferSize(streamBufferSize),
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
	}
}

func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		experimental.BufferPool(sharedPool), grpc.ForceServerCodecV2(codec{}),
		grpc.WriteBufferSize(streamBufferSize), grpc.ReadBufferSize(streamBufferSize),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
	}
}
