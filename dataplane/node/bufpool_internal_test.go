package node

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// TestBufferPoolTiers: a buffer has the length asked for and the capacity of its
// power-of-two tier; buffers that are not the pool's own are not kept.
func TestBufferPoolTiers(t *testing.T) {
	p := &bufferPool{}
	for _, tc := range []struct{ n, cap int }{{1, 256}, {256, 256}, {257, 512}, {40 << 10, 64 << 10}, {1 << 20, 1 << 20}, {20 << 20, 20 << 20}} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", tc.n, len(*b), cap(*b), tc.cap)
		}
		p.Put(b)
	}
	odd := make([]byte, 300)
	p.Put(&odd) // not a tier's size: dropped, never handed out
	if b := p.Get(300); cap(*b) != 512 {
		t.Errorf("Get(300) after a foreign Put: cap %d, want 512", cap(*b))
	}
}

// TestCodecRoundTrip: the node's codec marshals and unmarshals a link batch and a
// client's publish batch (vtprotobuf's encoder), above gRPC's pooling threshold
// (through the pool) and below, intact and as protobuf's deterministic encoding.
func TestCodecRoundTrip(t *testing.T) {
	link := &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 7}}}
	for i := range 100 {
		link.GetBatch().Messages = append(link.GetBatch().Messages, &nodev1.Message{
			Name: &nodev1.Name{Org: "o", Namespace: "n", Service: "s"}, Payload: make([]byte, 1000), Seq: uint64(i), Segments: []string{"s1"},
		})
	}
	small := publishBatchFixture(2, 10)
	small.Messages[1].Broadcast = true
	for _, tc := range []struct {
		in     proto.Message
		pooled bool
	}{{link, true}, {publishBatchFixture(maxBatchMessages, 1024), true}, {small, false}} {
		in := tc.in
		data, err := codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if mem.IsBelowBufferPoolingThreshold(data.Len()) == tc.pooled {
			t.Fatalf("%T: %d bytes, pooled %v: not the case this one is for", in, data.Len(), !tc.pooled)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data.Materialize(), want) {
			t.Fatalf("%T: the codec's %d bytes are not protobuf's %d", in, data.Len(), len(want))
		}
		out := in.ProtoReflect().New().Interface()
		if err := (codec{}).Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		if !proto.Equal(in, out) {
			t.Fatalf("%T changed in the round trip", in)
		}
	}
}

// publishBatchFixture is a client's batch of n messages of size bytes.
func publishBatchFixture(n, size int) *nodev1.PublishBatch {
	pb := &nodev1.PublishBatch{}
	for i := range n {
		pb.Messages = append(pb.Messages, &nodev1.PublishRequest{
			Name: &nodev1.Name{Org: "bench", Namespace: "dp", Service: "one"}, Payload: bytes.Repeat([]byte{byte('a' + i%26)}, size),
		})
	}
	return pb
}

// BenchmarkPublishBatchMarshal encodes a client's full batch of 1 KiB messages with
// protobuf's generated code and with vtprotobuf's, which the codec uses.
func BenchmarkPublishBatchMarshal(b *testing.B) {
	pb := publishBatchFixture(maxBatchMessages, 1024)
	buf := make([]byte, 0, 512<<10)
	b.Run("protobuf", func(b *testing.B) {
		opts := proto.MarshalOptions{UseCachedSize: true}
		for b.Loop() {
			_ = proto.Size(pb)
			_, _ = opts.MarshalAppend(buf[:0], pb)
		}
	})
	b.Run("vtprotobuf", func(b *testing.B) {
		for b.Loop() {
			_, _ = pb.MarshalToSizedBufferVT(buf[:pb.SizeVT()])
		}
	})
}

// TestDeliveryKeepsItsPayloads: a client's delivery is decoded with its payloads left
// in the bytes gRPC read it into, so those bytes must stay the payloads' once gRPC
// frees what it read (its pool hands the buffer out again at once): whether the
// response came in one buffer or in several.
func TestDeliveryKeepsItsPayloads(t *testing.T) {
	in := &nodev1.SubscribeResponse{SubscriptionId: 3}
	for i := range 8 {
		in.Messages = append(in.Messages, &nodev1.Message{
			Name: &nodev1.Name{Org: "o", Namespace: "n", Service: "s"}, Payload: bytes.Repeat([]byte{byte('a' + i)}, 1000), Seq: uint64(i + 1),
		})
	}
	b := mustMarshal(t, in)
	for _, pieces := range []int{1, 3} {
		var data mem.BufferSlice
		for i := range pieces {
			chunk := b[i*len(b)/pieces : (i+1)*len(b)/pieces]
			buf := sharedPool.Get(len(chunk))
			copy(*buf, chunk)
			data = append(data, mem.NewBuffer(buf, sharedPool))
		}
		out := &nodev1.SubscribeResponse{}
		if err := (codec{}).Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		// Whatever went back to the pool is handed out again, and written over.
		for range 4 * pieces {
			buf := sharedPool.Get(len(b) / pieces)
			for i := range *buf {
				(*buf)[i] = 'x'
			}
		}
		if !proto.Equal(in, out) {
			t.Fatalf("%d buffers: the delivery changed once gRPC's buffers were freed", pieces)
		}
	}
}
