package node

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// decodeFrame runs a LinkFrame, marshalled by protobuf, through the forwarding path's
// decoder.
func decodeFrame(t *testing.T, in *nodev1.LinkFrame) *frameIn {
	t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	f := &frameIn{}
	if err := f.decodeWire(mem.SliceBuffer(b)); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWireForwardsIntact: a batch protobuf encoded (hop count and segments in the
// middle of each message) is read, its hop count spent and its segments replaced, and
// the batch the node sends on decodes, with protobuf, to the same messages but for
// those two fields.
func TestWireForwardsIntact(t *testing.T) {
	id := uint64(7)
	var msgs []*nodev1.Message
	for i := range 3 {
		msgs = append(msgs, &nodev1.Message{
			Name:    &nodev1.Name{Org: "org", Namespace: "ns", Service: "svc", Id: &id},
			Payload: []byte{byte(i), 1, 2, 3}, Broadcast: i == 1, Ttl: 5, Origin: "a/n1", Seq: uint64(i + 1),
			PublishedUnixNano: 1234567890, Segments: []string{"s1", "s2"},
		})
	}
	f := decodeFrame(t, &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 9, Messages: msgs}}})
	if !f.isBatch || f.seq != 9 || len(f.msgs) != 3 {
		t.Fatalf("decoded batch %v seq %d with %d messages, want a batch 9 of 3", f.isBatch, f.seq, len(f.msgs))
	}
	want := dataplane.Name{Components: [3]string{"org", "ns", "svc"}, ComponentID: 7}
	out := &batchOut{seq: 10}
	for i := range f.msgs {
		r := &f.msgs[i]
		if r.bad != nil || r.name != want || r.m.TTL != 5 || r.m.Broadcast != (i == 1) || len(r.m.Segs) != 2 {
			t.Fatalf("message %d: name %v (%v) ttl %d broadcast %v segments %v", i, r.name, r.bad, r.m.TTL, r.m.Broadcast, r.m.Segs)
		}
		r.m.TTL--
		r.m.Segs = []string{"s3"}
		out.msgs = append(out.msgs, &r.m)
	}
	data := marshalWire(out)
	var got nodev1.LinkFrame
	if err := proto.Unmarshal(data.Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		m.Ttl, m.Segments = 4, []string{"s3"}
	}
	wantFrame := &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 10, Messages: msgs}}}
	if !proto.Equal(&got, wantFrame) {
		t.Fatalf("sent on:\n%v\nwant:\n%v", &got, wantFrame)
	}
	// The node's own encoding puts the two fields last: read back, they are cut off
	// without a copy.
	f2 := &frameIn{}
	if err := f2.decodeWire(mem.SliceBuffer(data.Materialize())); err != nil {
		t.Fatal(err)
	}
	for i := range f2.msgs {
		r := &f2.msgs[i]
		if r.m.Size()-len(r.m.Raw) != len("\x20\x04\x42\x02s3") || !bytes.Equal(r.m.Raw, f.msgs[i].m.Raw) {
			t.Fatalf("message %d read back: raw %x, want %x and then the hop count and segments", i, r.m.Raw, f.msgs[i].m.Raw)
		}
	}
}

// TestWirePublished: a published message's encoding is a Message protobuf reads
// back, and a delivery batch a SubscribeResponse.
func TestWirePublished(t *testing.T) {
	name, err := ParseName("org/ns/svc/3")
	if err != nil {
		t.Fatal(err)
	}
	m := newMsg(name, []byte("hello"), true, 16, "g/n", 42, 99)
	data := marshalWire(&deliveryOut{msgs: []*msg{m, m}})
	var got nodev1.SubscribeResponse
	if err := proto.Unmarshal(data.Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	want := &nodev1.Message{Name: NameProto(name), Payload: []byte("hello"), Broadcast: true, Ttl: 16, Origin: "g/n", Seq: 42, PublishedUnixNano: 99}
	if len(got.GetMessages()) != 2 || !proto.Equal(got.GetMessages()[0], want) || !proto.Equal(got.GetMessages()[1], want) {
		t.Fatalf("delivered %v, want twice %v", &got, want)
	}
}

// TestWireBadName: a message whose name is missing or malformed is read (to be
// counted as malformed), the batch's other messages are not affected, and a control
// frame is decoded as a LinkFrame.
func TestWireBadName(t *testing.T) {
	f := decodeFrame(t, &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 1, Messages: []*nodev1.Message{
		{Payload: []byte("no name")},
		{Name: &nodev1.Name{Org: "o/x", Namespace: "ns", Service: "svc"}},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}},
	}}}})
	if len(f.msgs) != 3 || f.msgs[0].bad == nil || f.msgs[1].bad == nil || f.msgs[2].bad != nil {
		t.Fatalf("decoded %d messages, errors %v %v %v", len(f.msgs), f.msgs[0].bad, f.msgs[1].bad, f.msgs[2].bad)
	}
	c := decodeFrame(t, &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_BatchAck{BatchAck: &nodev1.BatchAck{Seq: 5}}})
	if c.isBatch || c.ctrl.GetBatchAck().GetSeq() != 5 {
		t.Fatalf("control frame decoded as %v", c.ctrl)
	}
	if err := (&frameIn{}).decodeWire(mem.SliceBuffer([]byte{0x0a, 0x05, 0x0a})); err == nil {
		t.Fatal("a truncated frame decoded")
	}
}

// TestWirePublishBatch: a PublishBatch is read without decoding its payloads.
func TestWirePublishBatch(t *testing.T) {
	b, err := proto.Marshal(&nodev1.PublishBatch{Messages: []*nodev1.PublishRequest{
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Payload: []byte("p1")},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Payload: []byte("p2"), Broadcast: true},
		{Payload: []byte("no name")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var p publishIn
	if err := p.decodeWire(mem.SliceBuffer(b)); err != nil {
		t.Fatal(err)
	}
	defer p.free()
	if len(p.reqs) != 3 || string(p.reqs[1].payload) != "p2" || !p.reqs[1].broadcast || p.reqs[0].broadcast ||
		p.reqs[0].name.String() != "o/ns/svc" || p.reqs[2].bad == nil || len(p.names) != 1 {
		t.Fatalf("decoded %+v", p.reqs)
	}
}

// TestDecodeDelivery: a client's decoder of deliveries gives what protobuf gives, and
// leaves to protobuf what it does not know.
func TestDecodeDelivery(t *testing.T) {
	id := uint64(4)
	in := &nodev1.SubscribeResponse{Messages: []*nodev1.Message{
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc", Id: &id}, Payload: []byte("p1"), Ttl: 3, Origin: "a/n1", Seq: 1, PublishedUnixNano: -5, Segments: []string{"s1", "s2"}},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Payload: []byte{}, Broadcast: true, Origin: "a/n1", Seq: 2},
		{Name: &nodev1.Name{Org: "o", Namespace: "other", Service: "svc"}, Origin: "a/n2", Segments: []string{"s3"}},
	}}
	for _, r := range []*nodev1.SubscribeResponse{in, {SubscriptionId: 9}, {}} {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got nodev1.SubscribeResponse
		if !decodeDelivery(b, &got) {
			t.Fatalf("%v: not decoded", r)
		}
		if !proto.Equal(&got, r) {
			t.Fatalf("decoded %v, want %v", &got, r)
		}
	}
	got := &nodev1.SubscribeResponse{}
	if !decodeDelivery(mustMarshal(t, in), got) {
		t.Fatal("not decoded")
	}
	got.Messages[0].Payload = append(got.Messages[0].Payload, 'x', 'y') // never into the next payload
	if string(got.Messages[1].Payload) != "" || string(got.Messages[0].Payload) != "p1xy" {
		t.Fatalf("payloads %q %q", got.Messages[0].Payload, got.Messages[1].Payload)
	}
	got.Messages[0].Segments = append(got.Messages[0].Segments, "s9") // nor into the next segments
	if len(got.Messages[2].Segments) != 1 || got.Messages[2].Segments[0] != "s3" {
		t.Fatalf("segments %q", got.Messages[2].Segments)
	}
	// An unknown field (here: a field 9 of Message) and a string that is not UTF-8 are
	// protobuf's to decode.
	unknown := append(mustMarshal(t, in), 0x12, 0x02, 0x48, 0x01) // one more message: {9: 1}
	if decodeDelivery(unknown, &nodev1.SubscribeResponse{}) {
		t.Fatal("decoded a message with an unknown field")
	}
	bad := mustMarshal(t, &nodev1.SubscribeResponse{Messages: []*nodev1.Message{{Origin: "ok"}}})
	bad[len(bad)-1] = 0xff
	if decodeDelivery(bad, &nodev1.SubscribeResponse{}) {
		t.Fatal("decoded an origin that is not UTF-8")
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWireRefusesOutOfRangeFieldNumber: a message with a field number past protobuf's
// largest is refused with the frame, not forwarded for every subscriber's decoder to
// fail on (protowire.ConsumeTag checks only the low bound).
func TestWireRefusesOutOfRangeFieldNumber(t *testing.T) {
	id := uint64(1)
	msg := mustMarshal(t, &nodev1.Message{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc", Id: &id}, Payload: []byte("p"), Ttl: 3})
	msg = protowire.AppendVarint(msg, uint64(protowire.MaxValidNumber+1)<<3) // a varint field numbered 2^29
	msg = protowire.AppendVarint(msg, 1)
	batch := protowire.AppendTag(nil, wire.BatchFieldMessages, protowire.BytesType)
	batch = protowire.AppendBytes(batch, msg)
	frame := protowire.AppendTag(nil, wire.FrameFieldBatch, protowire.BytesType)
	frame = protowire.AppendBytes(frame, batch)
	if proto.Unmarshal(frame, &nodev1.LinkFrame{}) == nil {
		t.Fatal("protobuf reads the frame: the test needs one it refuses")
	}
	f := &frameIn{}
	if err := f.decodeWire(mem.SliceBuffer(frame)); err == nil {
		t.Fatalf("decoded a frame with field number %d into %d messages, want it refused", protowire.MaxValidNumber+1, len(f.msgs))
	}
}
