package node

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// The forwarding path (its codec is internal/wire's frame.go): a message is decoded
// once, where it enters the node's network (Publish), into its wire form, and from
// then on every node passes that form on. A node that receives a batch over a link or
// a peering reads only what forwarding needs from each message — the name, the hop
// count, the broadcast flag and the segments — and keeps the rest as the bytes it
// received; the outgoing batch (to the next node, or to a local subscriber) is those
// bytes with the hop count and the segments appended. Nothing is unmarshalled into a
// struct and marshalled back, the payload is never copied on its own, and a received
// batch's bytes stay in the buffer gRPC read them into until the batch's custody ends.

// msg is a message as the node holds it (see wire.Message).
type msg = wire.Message

// wireName is n as internal/wire takes it.
func wireName(n dataplane.Name) wire.Name {
	return wire.Name{Components: n.Components, ID: n.ComponentID, HasID: n.HasID()}
}

// newMsg encodes a message published at this node, in one allocation.
func newMsg(name dataplane.Name, payload []byte, broadcast bool, ttl uint32, origin string, seq uint64, at int64) *msg {
	b := appendPublished(make([]byte, 0, publishedSize(name, len(payload), origin)), name, payload, broadcast, origin, seq, at)
	return &msg{Raw: b, TTL: ttl, Broadcast: broadcast}
}

// publishedSize bounds the size of a published message's raw encoding.
func publishedSize(name dataplane.Name, payload int, origin string) int {
	return wire.PublishedSize(wireName(name), payload, origin)
}

// appendPublished appends the raw encoding of a message published at this node: every
// field but the hop count (msg.TTL) and the segments (none).
func appendPublished(b []byte, name dataplane.Name, payload []byte, broadcast bool, origin string, seq uint64, at int64) []byte {
	return wire.AppendPublished(b, wireName(name), payload, broadcast, origin, seq, at)
}

// wireMarshaler is a message the node's codec encodes itself instead of through
// protobuf.
type wireMarshaler interface {
	wireSize() int
	appendWire(b []byte) []byte
}

// wireUnmarshaler is a message the node's codec decodes itself. It takes over the
// buffer (and frees it, at once or later).
type wireUnmarshaler interface {
	decodeWire(buf mem.Buffer) error
}

// batchOut is the LinkFrame of one outgoing batch.
type batchOut struct {
	msgs []*msg
	seq  uint64
}

func (o *batchOut) batchSize() int {
	n := 0
	for _, m := range o.msgs {
		n += wire.SizeField(m.Size())
	}
	if o.seq != 0 {
		n += 1 + protowire.SizeVarint(o.seq)
	}
	return n
}

func (o *batchOut) wireSize() int { return wire.SizeField(o.batchSize()) }

func (o *batchOut) appendWire(b []byte) []byte {
	b = protowire.AppendTag(b, wire.FrameFieldBatch, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(o.batchSize()))
	for _, m := range o.msgs {
		b = m.AppendField(b, wire.BatchFieldMessages)
	}
	if o.seq != 0 {
		b = protowire.AppendTag(b, wire.BatchFieldSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, o.seq)
	}
	return b
}

// deliveryOut is the SubscribeResponse of one batch to a local subscriber.
type deliveryOut struct{ msgs []*msg }

func (o *deliveryOut) wireSize() int {
	n := 0
	for _, m := range o.msgs {
		n += wire.SizeField(m.Size())
	}
	return n
}

func (o *deliveryOut) appendWire(b []byte) []byte {
	for _, m := range o.msgs {
		b = m.AppendField(b, wire.DeliveryFieldMessages)
	}
	return b
}

// rxMsg is a message of a received batch: its wire form, its name (or why the name is
// bad: the message is dropped, counted as malformed) and its origin (in the batch's
// buffer), which the receiving conn checks.
type rxMsg struct {
	m      msg
	name   dataplane.Name
	bad    error
	origin []byte
}

// maxNameCache bounds a stream's cache of decoded names; it starts over when full.
const maxNameCache = 4096

// frameIn is one frame received over a link or a peering: a batch, kept in its wire
// form, or a control frame, decoded. It is reused frame after frame by one stream's
// reader, whose cache of decoded names it keeps.
type frameIn struct {
	names nameCache

	isBatch bool
	seq     uint64
	msgs    []rxMsg
	buf     mem.Buffer // what msgs point into; the batch's custody frees it
	ctrl    *nodev1.LinkFrame
}

// errWire is a frame that is not valid protobuf; the codec's Unmarshal names it a
// malformed frame.
var errWire = wire.ErrMalformed

func (f *frameIn) decodeWire(buf mem.Buffer) error {
	f.isBatch, f.seq, f.msgs, f.buf, f.ctrl = false, 0, nil, nil, nil
	data := buf.ReadOnlyData()
	// Which member of the oneof the frame carries: the last one present.
	last, err := wire.FrameMember(data)
	if err != nil {
		buf.Free()
		return errWire
	}
	if last != wire.FrameFieldBatch {
		f.ctrl = &nodev1.LinkFrame{}
		err := proto.Unmarshal(data, f.ctrl)
		buf.Free()
		return err
	}
	f.isBatch = true
	// The batch's messages are allocated once, at their count: a guess from the
	// frame's size allocated (and cleared) four times too much for 1 KiB messages.
	count := 0
	if err := wire.EachField(data, wire.FrameFieldBatch, func(b []byte) error {
		return wire.EachField(b, wire.BatchFieldMessages, func([]byte) error { count++; return nil })
	}); err != nil {
		buf.Free()
		return err
	}
	f.msgs = make([]rxMsg, 0, count)
	// A batch present several times is merged, as protobuf does: its messages
	// concatenated, the last seq winning.
	if err := wire.EachField(data, wire.FrameFieldBatch, f.decodeBatch); err != nil {
		buf.Free()
		return err
	}
	f.buf = buf
	return nil
}

func (f *frameIn) decodeBatch(b []byte) error {
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		switch {
		case num == wire.BatchFieldMessages && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errWire
			}
			b = b[n:]
			f.msgs = append(f.msgs, rxMsg{})
			if err := f.decodeMessage(v, &f.msgs[len(f.msgs)-1]); err != nil {
				return err
			}
		case num == wire.BatchFieldSeq && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errWire
			}
			b = b[n:]
			f.seq = v
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errWire
			}
			b = b[n:]
		}
	}
	return nil
}

// decodeMessage reads what forwarding needs from one encoded Message (see
// wire.DecodeMessage), and its name through the stream's cache.
func (f *frameIn) decodeMessage(data []byte, r *rxMsg) error {
	name, hasName, origin, err := wire.DecodeMessage(data, &r.m)
	if err != nil {
		return err
	}
	r.origin = origin
	if !hasName {
		r.bad = fmt.Errorf("%w: name is missing", ErrBadName)
		return nil
	}
	r.name, r.bad = f.names.decode(name)
	return nil
}

// nameCache maps encoded Names to their decoded and checked form: a stream carries
// few names, each many times. One stream's reader owns it.
type nameCache map[string]dataplane.Name

// decode decodes and checks an encoded Name, through the cache.
func (c *nameCache) decode(b []byte) (dataplane.Name, error) {
	if n, ok := (*c)[string(b)]; ok {
		return n, nil
	}
	wn, err := wire.DecodeName(b)
	if err != nil {
		return dataplane.Name{}, fmt.Errorf("%w: malformed", ErrBadName)
	}
	p := &nodev1.Name{Org: wn.Components[0], Namespace: wn.Components[1], Service: wn.Components[2]}
	if wn.HasID {
		p.Id = &wn.ID
	}
	name, err := nameFromProto(p)
	if err != nil {
		return dataplane.Name{}, err
	}
	if *c == nil || len(*c) >= maxNameCache {
		*c = make(nameCache)
	}
	(*c)[string(b)] = name
	return name, nil
}

// publishIn is one PublishBatch received from a local client, decoded but for the
// payloads, which stay in the buffer gRPC read the batch into until free. With
// requests set it is a RequestBatch instead: its RequestRequests have the name and the
// payload where PublishRequest has them, and a timeout and an id in fields 3 and 4.
type publishIn struct {
	names    nameCache
	requests bool
	reqs     []publishReq
	buf      mem.Buffer
}

type publishReq struct {
	name      dataplane.Name
	bad       error
	payload   []byte
	broadcast bool
	// A RequestRequest's.
	timeoutMs uint32
	id        uint64
}

func (p *publishIn) decodeWire(buf mem.Buffer) error {
	p.reqs, p.buf = p.reqs[:0], nil
	if err := wire.EachField(buf.ReadOnlyData(), wire.PublishBatchFieldMessages, p.decodeRequest); err != nil {
		buf.Free()
		return err
	}
	p.buf = buf
	return nil
}

func (p *publishIn) decodeRequest(b []byte) error {
	w, err := wire.DecodePublishRequest(b, p.requests)
	if err != nil {
		return err
	}
	r := publishReq{payload: w.Payload, broadcast: w.Broadcast, timeoutMs: w.TimeoutMs, id: w.ID}
	if !w.HasName {
		r.bad = fmt.Errorf("%w: name is missing", ErrBadName)
	} else {
		r.name, r.bad = p.names.decode(w.Name)
	}
	p.reqs = append(p.reqs, r)
	return nil
}

// free gives the batch's buffer back; its payloads are gone with it.
func (p *publishIn) free() {
	if p.buf != nil {
		p.buf.Free()
		p.buf = nil
	}
	clear(p.reqs)
}

// respondIn is one RespondBatch received from a local client, decoded but for the
// payloads, which stay in the buffer gRPC read the batch into until free.
type respondIn struct {
	answers []respondAnswer
	buf     mem.Buffer
}

type respondAnswer struct {
	token, payload []byte
}

func (p *respondIn) decodeWire(buf mem.Buffer) error {
	p.answers, p.buf = p.answers[:0], nil
	if err := wire.EachField(buf.ReadOnlyData(), wire.RespondBatchFieldAnswers, p.decodeAnswer); err != nil {
		buf.Free()
		return err
	}
	p.buf = buf
	return nil
}

func (p *respondIn) decodeAnswer(b []byte) error {
	token, payload, err := wire.DecodeRespondRequest(b)
	if err != nil {
		return err
	}
	p.answers = append(p.answers, respondAnswer{token: token, payload: payload})
	return nil
}

// free gives the batch's buffer back; its tokens and payloads are gone with it.
func (p *respondIn) free() {
	if p.buf != nil {
		p.buf.Free()
		p.buf = nil
	}
	clear(p.answers)
}

// streamAnswer is the answer to one request of a RequestStream.
type streamAnswer = wire.Answer

// answersOut is the RequestResponseBatch of answers sent together.
type answersOut struct{ answers []streamAnswer }

func (o *answersOut) wireSize() int {
	n := 0
	for i := range o.answers {
		n += wire.SizeField(o.answers[i].Size())
	}
	return n
}

func (o *answersOut) appendWire(b []byte) []byte {
	for i := range o.answers {
		b = o.answers[i].AppendBatchItem(b)
	}
	return b
}

// decodeDelivery decodes a SubscribeResponse for a client of the node (the codec of
// ClientOptions): what protobuf's Unmarshal does, with the response's messages, names
// and instance ids each allocated once for the whole response instead of once per
// message, the payloads left in data (which the caller gives up to them), and strings
// repeated from one message to the next (names, origins) shared. It reports false,
// having changed nothing the caller keeps, for anything it does not know (an unknown
// field, a string that is not UTF-8), which protobuf then decodes.
func decodeDelivery(data []byte, r *nodev1.SubscribeResponse) bool {
	var id uint64
	count := 0
	for b := data; len(b) > 0; {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == wire.DeliveryFieldID && typ == protowire.VarintType:
			if id, n = protowire.ConsumeVarint(b); n < 0 {
				return false
			}
		case num == wire.DeliveryFieldMessages && typ == protowire.BytesType:
			if _, n = protowire.ConsumeBytes(b); n < 0 {
				return false
			}
			count++
		default:
			return false
		}
		b = b[n:]
	}
	d := deliveryDecoder{
		msgs:  make([]nodev1.Message, count),
		names: make([]nodev1.Name, count),
		ids:   make([]uint64, count),
	}
	out := make([]*nodev1.Message, 0, count)
	for b := data; len(b) > 0; {
		num, _, n := wire.ConsumeTag(b)
		b = b[n:]
		if num != wire.DeliveryFieldMessages {
			_, n = protowire.ConsumeVarint(b)
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		b = b[n:]
		m := &d.msgs[len(out)]
		if !d.message(v, m, len(out)) {
			return false
		}
		out = append(out, m)
	}
	r.SubscriptionId, r.Messages = id, nil
	if len(out) > 0 {
		r.Messages = out
	}
	return true
}

// deliveryDecoder holds one response's allocations and the strings last decoded.
type deliveryDecoder struct {
	msgs  []nodev1.Message
	names []nodev1.Name
	ids   []uint64
	segs  []string  // the messages' segments, each message's a slice of it
	last  [5]string // org, namespace, service, origin, segment
}

// str returns b as a string, the one decoded last in slot i when equal.
func (d *deliveryDecoder) str(i int, b []byte) (string, bool) {
	if d.last[i] == string(b) {
		return d.last[i], true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	d.last[i] = string(b)
	return d.last[i], true
}

func (d *deliveryDecoder) message(b []byte, m *nodev1.Message, k int) bool {
	segs := len(d.segs)
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var (
			v  []byte
			x  uint64
			ok = true
		)
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == wire.MessageFieldName && typ == protowire.BytesType && m.Name == nil:
			m.Name = &d.names[k]
			ok = d.name(v, m.Name, k)
		case num == wire.MessageFieldPayload && typ == protowire.BytesType:
			m.Payload = v[:len(v):len(v)]
		case num == wire.MessageFieldBroadcast && typ == protowire.VarintType:
			m.Broadcast = x != 0
		case num == wire.MessageFieldTTL && typ == protowire.VarintType:
			m.Ttl = uint32(x)
		case num == wire.MessageFieldOrigin && typ == protowire.BytesType:
			m.Origin, ok = d.str(3, v)
		case num == wire.MessageFieldSeq && typ == protowire.VarintType:
			m.Seq = x
		case num == wire.MessageFieldPublished && typ == protowire.VarintType:
			m.PublishedUnixNano = int64(x)
		case num == wire.MessageFieldReplyTo && typ == protowire.BytesType:
			m.ReplyTo, ok = string(v), utf8.Valid(v)
		case num == wire.MessageFieldInReplyTo && typ == protowire.BytesType:
			m.InReplyTo, ok = string(v), utf8.Valid(v)
		case num == wire.MessageFieldNoResponders && typ == protowire.VarintType:
			m.NoResponders = x != 0
		case num == wire.MessageFieldSegments && typ == protowire.BytesType:
			var s string
			s, ok = d.str(4, v)
			if d.segs == nil {
				// Messages that came over a link carry its segments: a few each.
				d.segs = make([]string, 0, 2*(len(d.msgs)-k))
			}
			d.segs = append(d.segs, s)
		default:
			return false // a field this decoder does not know, or a name given twice
		}
		if !ok {
			return false
		}
	}
	if len(d.segs) > segs {
		m.Segments = d.segs[segs:len(d.segs):len(d.segs)]
	}
	return true
}

func (d *deliveryDecoder) name(b []byte, p *nodev1.Name, k int) bool {
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num >= wire.NameFieldOrg && num <= wire.NameFieldService && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			s, ok := d.str(int(num-wire.NameFieldOrg), v)
			if !ok {
				return false
			}
			switch num {
			case wire.NameFieldOrg:
				p.Org = s
			case wire.NameFieldNamespace:
				p.Namespace = s
			default:
				p.Service = s
			}
		case num == wire.NameFieldID && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			d.ids[k] = x
			p.Id = &d.ids[k]
		default:
			return false
		}
	}
	return true
}
