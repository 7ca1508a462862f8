package node

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// The forwarding path reads frames from peers by hand (protowire), so whatever bytes a
// peer sends must neither crash it nor be read differently from protobuf.

func fuzzSeeds(f *testing.F, ms ...proto.Message) {
	for _, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func seedMessages() []*nodev1.Message {
	id := uint64(3)
	return []*nodev1.Message{
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc", Id: &id}, Payload: []byte("p"), Ttl: 4, Origin: "a/n1", Seq: 1, PublishedUnixNano: 7, Segments: []string{"s1"}},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Broadcast: true, Origin: "a/n2", Seq: 2},
	}
}

// FuzzFrameDecode: a frame the decoder takes as a batch holds what protobuf reads in
// it, and each message it keeps is sent on as bytes protobuf reads as the original.
func FuzzFrameDecode(f *testing.F) {
	fuzzSeeds(f,
		&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 5, Messages: seedMessages()}}},
		&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{}}},
		&nodev1.LinkFrame{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := &frameIn{}
		if err := fr.decodeWire(mem.SliceBuffer(data)); err != nil || !fr.isBatch {
			return
		}
		// Whatever the node forwards, the next node and the subscribers' decoders
		// must read, even from a frame protobuf would refuse as a whole.
		fwd := &batchOut{seq: fr.seq}
		for i := range fr.msgs {
			if fr.msgs[i].bad == nil {
				fwd.msgs = append(fwd.msgs, &fr.msgs[i].m)
			}
		}
		if err := proto.Unmarshal(marshalWire(fwd).Materialize(), &nodev1.LinkFrame{}); err != nil {
			t.Fatalf("the node would forward a batch protobuf cannot read: %v", err)
		}
		var want nodev1.LinkFrame
		if proto.Unmarshal(data, &want) != nil {
			return // protobuf refuses the frame; what is forwarded of it is checked above
		}
		batch := want.GetBatch()
		if fr.seq != batch.GetSeq() || len(fr.msgs) != len(batch.GetMessages()) {
			t.Fatalf("batch seq %d with %d messages, protobuf reads seq %d with %d", fr.seq, len(fr.msgs), batch.GetSeq(), len(batch.GetMessages()))
		}
		out := &batchOut{seq: fr.seq}
		var kept []*nodev1.Message
		for i := range fr.msgs {
			r := &fr.msgs[i]
			pm := batch.GetMessages()[i]
			if r.m.TTL != pm.GetTtl() || r.m.Broadcast != pm.GetBroadcast() || len(r.m.Segs) != len(pm.GetSegments()) {
				t.Fatalf("message %d: ttl %d broadcast %v segments %q; protobuf reads %d %v %q", i, r.m.TTL, r.m.Broadcast, r.m.Segs, pm.GetTtl(), pm.GetBroadcast(), pm.GetSegments())
			}
			if r.bad != nil {
				continue
			}
			out.msgs = append(out.msgs, &r.m)
			kept = append(kept, pm)
		}
		var got nodev1.LinkFrame
		if err := proto.Unmarshal(marshalWire(out).Materialize(), &got); err != nil {
			t.Fatalf("the batch sent on does not decode: %v", err)
		}
		if n := len(got.GetBatch().GetMessages()); n != len(kept) {
			t.Fatalf("sent on %d messages, want %d", n, len(kept))
		}
		for i, m := range got.GetBatch().GetMessages() {
			if !proto.Equal(m, kept[i]) {
				t.Fatalf("message %d sent on as %v, received as %v", i, m, kept[i])
			}
		}
	})
}

// FuzzDecodeDelivery: what the client codec decodes by hand, protobuf decodes the same.
func FuzzDecodeDelivery(f *testing.F) {
	fuzzSeeds(f, &nodev1.SubscribeResponse{SubscriptionId: 2, Messages: seedMessages()}, &nodev1.SubscribeResponse{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got nodev1.SubscribeResponse
		if !decodeDelivery(data, &got) {
			return
		}
		var want nodev1.SubscribeResponse
		if err := proto.Unmarshal(data, &want); err != nil {
			t.Fatalf("decoded what protobuf refuses (%v): %v", err, &got)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %v, protobuf reads %v", &got, &want)
		}
	})
}

// FuzzPublishDecode: a publish batch from a local client is read as protobuf reads it:
// the same requests, payloads, flags and names (or the same refusal of a name).
func FuzzPublishDecode(f *testing.F) {
	id := uint64(1)
	fuzzSeeds(f, &nodev1.PublishBatch{Messages: []*nodev1.PublishRequest{
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc", Id: &id}, Payload: []byte("x")},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Broadcast: true},
		{Payload: []byte("no name")},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &publishIn{}
		if err := p.decodeWire(mem.SliceBuffer(data)); err != nil {
			return
		}
		defer p.free()
		var want nodev1.PublishBatch
		if proto.Unmarshal(data, &want) != nil {
			return
		}
		if len(p.reqs) != len(want.GetMessages()) {
			t.Fatalf("%d requests, protobuf reads %d", len(p.reqs), len(want.GetMessages()))
		}
		for i, r := range p.reqs {
			pm := want.GetMessages()[i]
			if string(r.payload) != string(pm.GetPayload()) || r.broadcast != pm.GetBroadcast() {
				t.Fatalf("request %d: payload %q broadcast %v; protobuf reads %q %v", i, r.payload, r.broadcast, pm.GetPayload(), pm.GetBroadcast())
			}
			sameName(t, i, r, pm.GetName())
		}
	})
}

// sameName checks that request i was given the name protobuf reads, or refused as
// protobuf's reading is (a missing name is refused).
func sameName(t *testing.T, i int, r publishReq, pn *nodev1.Name) {
	t.Helper()
	if pn == nil {
		if r.bad == nil {
			t.Fatalf("request %d without a name accepted as %v", i, r.name)
		}
		return
	}
	name, err := nameFromProto(pn)
	if (err == nil) != (r.bad == nil) || (err == nil && name != r.name) {
		t.Fatalf("request %d: name %v (%v); from protobuf's reading %v (%v)", i, r.name, r.bad, name, err)
	}
}

// FuzzRequestBatchDecode: a RequestStream batch is read as protobuf reads it: the same
// requests, payloads, timeouts, ids and names (or the same refusal of a name).
func FuzzRequestBatchDecode(f *testing.F) {
	fuzzSeeds(f, &nodev1.RequestBatch{Requests: []*nodev1.RequestRequest{
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Payload: []byte("x"), TimeoutMs: 300, Id: 7},
		{Name: &nodev1.Name{Org: "o", Namespace: "ns", Service: "svc"}, Id: 1 << 40},
		{Payload: []byte("no name"), Id: 2},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &publishIn{requests: true}
		if err := p.decodeWire(mem.SliceBuffer(data)); err != nil {
			return
		}
		defer p.free()
		var want nodev1.RequestBatch
		if proto.Unmarshal(data, &want) != nil {
			return
		}
		if len(p.reqs) != len(want.GetRequests()) {
			t.Fatalf("%d requests, protobuf reads %d", len(p.reqs), len(want.GetRequests()))
		}
		for i, r := range p.reqs {
			pm := want.GetRequests()[i]
			if string(r.payload) != string(pm.GetPayload()) || r.timeoutMs != pm.GetTimeoutMs() || r.id != pm.GetId() || r.broadcast {
				t.Fatalf("request %d: payload %q timeout %d id %d broadcast %v; protobuf reads %q %d %d", i, r.payload, r.timeoutMs, r.id, r.broadcast, pm.GetPayload(), pm.GetTimeoutMs(), pm.GetId())
			}
			sameName(t, i, r, pm.GetName())
		}
	})
}

// FuzzRespondBatchDecode: a RespondStream batch is read as protobuf reads it.
func FuzzRespondBatchDecode(f *testing.F) {
	fuzzSeeds(f, &nodev1.RespondBatch{Answers: []*nodev1.RespondRequest{
		{ReplyTo: "a/n1#1", Payload: []byte("x")}, {ReplyTo: "a/n1#2"}, {},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &respondIn{}
		if err := p.decodeWire(mem.SliceBuffer(data)); err != nil {
			return
		}
		defer p.free()
		var want nodev1.RespondBatch
		if proto.Unmarshal(data, &want) != nil {
			return
		}
		if len(p.answers) != len(want.GetAnswers()) {
			t.Fatalf("%d answers, protobuf reads %d", len(p.answers), len(want.GetAnswers()))
		}
		for i, a := range p.answers {
			pm := want.GetAnswers()[i]
			if string(a.token) != pm.GetReplyTo() || string(a.payload) != string(pm.GetPayload()) {
				t.Fatalf("answer %d: %q %q; protobuf reads %q %q", i, a.token, a.payload, pm.GetReplyTo(), pm.GetPayload())
			}
		}
	})
}

// TestAnswersOutWire: the node's encoding of a batch of RequestStream answers is what
// protobuf reads as those answers.
func TestAnswersOutWire(t *testing.T) {
	out := &answersOut{answers: []streamAnswer{
		{ID: 1, Payload: []byte("p"), Responder: "b/n1"},
		{ID: 1 << 40, Code: 14, Error: "no responders for o/ns/svc: …"},
		{},
	}}
	var got nodev1.RequestResponseBatch
	if err := proto.Unmarshal(marshalWire(out).Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	want := &nodev1.RequestResponseBatch{Responses: []*nodev1.RequestResponse{
		{Id: 1, Payload: []byte("p"), Responder: "b/n1"},
		{Id: 1 << 40, Code: 14, Error: "no responders for o/ns/svc: …"},
		{},
	}}
	if !proto.Equal(&got, want) {
		t.Fatalf("encoded %v, want %v", &got, want)
	}
}

// FuzzDecodeReply: a reply the node reads by hand gives the requester what protobuf
// reads in it, whenever protobuf reads it at all.
func FuzzDecodeReply(f *testing.F) {
	fuzzSeeds(f,
		&nodev1.Message{Payload: []byte("pong"), Origin: "b/n1", InReplyTo: "a/n1#7"},
		&nodev1.Message{NoResponders: true, Origin: "b/n1", InReplyTo: "a/n1#8"},
		&nodev1.Message{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got := decodeReply(&msg{Raw: data})
		var want nodev1.Message
		if proto.Unmarshal(data, &want) != nil {
			return
		}
		if !bytes.Equal(got.Payload, want.GetPayload()) || got.Responder != want.GetOrigin() || got.noResponders != want.GetNoResponders() {
			t.Fatalf("read %q from %q, no responders %v; protobuf reads %q from %q, %v",
				got.Payload, got.Responder, got.noResponders, want.GetPayload(), want.GetOrigin(), want.GetNoResponders())
		}
	})
}
