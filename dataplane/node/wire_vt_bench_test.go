package node

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// A link frame as a node forwards it: 64 messages of 1 KiB, received, their hop
// count spent and their segments replaced, and sent on. The hand-written codec
// (frameIn, batchOut) against vtprotobuf's generated one (pooled LinkFrame,
// UnmarshalVT, MarshalVT), each reading the names into dataplane.Name as
// forwarding needs them.
func benchFrame(b *testing.B) []byte {
	// As a node sends it: every message's hop count and segments last.
	name, err := ParseName("bench/dp/one/7")
	if err != nil {
		b.Fatal(err)
	}
	out := &batchOut{seq: 9}
	for i := range 64 {
		m := newMsg(name, make([]byte, 1024), false, 5, "a/n1", uint64(i+1), 1234567890)
		m.Segs = []string{"s1"}
		out.msgs = append(out.msgs, m)
	}
	raw := out.appendWire(nil)
	var check nodev1.LinkFrame
	if err := proto.Unmarshal(raw, &check); err != nil || len(check.GetBatch().GetMessages()) != 64 {
		b.Fatalf("bench frame: %v", err)
	}
	return raw
}

func BenchmarkFrameForwardHand(b *testing.B) {
	raw := benchFrame(b)
	f := &frameIn{}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := f.decodeWire(mem.SliceBuffer(raw)); err != nil {
			b.Fatal(err)
		}
		out := &batchOut{seq: f.seq + 1, msgs: make([]*msg, 0, len(f.msgs))}
		for i := range f.msgs {
			r := &f.msgs[i]
			if r.bad != nil {
				b.Fatal(r.bad)
			}
			r.m.TTL--
			r.m.Segs = append(r.m.Segs[:0], "s2")
			out.msgs = append(out.msgs, &r.m)
		}
		marshalWire(out).Free()
	}
}

func BenchmarkFrameForwardVT(b *testing.B) { benchFrameForwardVT(b, true) }

// The same without the pool: a received batch stays in custody until its next hop
// acknowledges it, so its messages cannot go back to a pool frame by frame.
func BenchmarkFrameForwardVTUnpooled(b *testing.B) { benchFrameForwardVT(b, false) }

func benchFrameForwardVT(b *testing.B, pooled bool) {
	raw := benchFrame(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		f := &nodev1.LinkFrame{}
		if pooled {
			f = nodev1.LinkFrameFromVTPool()
		}
		if err := f.UnmarshalVT(raw); err != nil {
			b.Fatal(err)
		}
		batch := f.GetBatch()
		for _, m := range batch.Messages {
			if _, err := nameFromProto(m.Name); err != nil {
				b.Fatal(err)
			}
			m.Ttl--
			m.Segments = append(m.Segments[:0], "s2")
		}
		batch.Seq++
		size := f.SizeVT()
		buf := sharedPool.Get(size)
		if _, err := f.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
			b.Fatal(err)
		}
		sharedPool.Put(buf)
		if pooled {
			f.ReturnToVTPool()
		}
	}
}

// A delivery to a client of the node (SubscribeResponse of 64 messages of 1 KiB):
// the client codec's hand decoder (decodeDelivery) against vtprotobuf's
// UnmarshalVT, each into a new response, which the client keeps.
func benchDelivery(b *testing.B) []byte {
	name, err := ParseName("bench/dp/one/7")
	if err != nil {
		b.Fatal(err)
	}
	out := &deliveryOut{}
	for i := range 64 {
		m := newMsg(name, make([]byte, 1024), false, 5, "a/n1", uint64(i+1), 1234567890)
		m.Segs = []string{"s1"}
		out.msgs = append(out.msgs, m)
	}
	return out.appendWire(nil)
}

func BenchmarkDeliveryDecodeHand(b *testing.B) {
	raw := benchDelivery(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var r nodev1.SubscribeResponse
		if !decodeDelivery(raw, &r) || len(r.Messages) != 64 {
			b.Fatal("not decoded")
		}
	}
}

func BenchmarkDeliveryDecodeVT(b *testing.B) {
	raw := benchDelivery(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var r nodev1.SubscribeResponse
		if err := r.UnmarshalVT(raw); err != nil || len(r.Messages) != 64 {
			b.Fatal(err)
		}
	}
}
