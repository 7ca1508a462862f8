package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// The forwarding path: a message is decoded once, where it enters the node's network
// (Publish), into its wire form, and from then on every node passes that form on. A
// node that receives a batch over a link or a peering reads only what forwarding needs
// from each message — the name, the hop count, the broadcast flag and the segments —
// and keeps the rest as the bytes it received; the outgoing batch (to the next node,
// or to a local subscriber) is those bytes with the hop count and the segments
// appended. Nothing is unmarshalled into a struct and marshalled back, the payload is
// never copied on its own, and a received batch's bytes stay in the buffer gRPC read
// them into until the batch's custody ends.

// msg is a message as the node holds it: its wire form without the two fields that
// change on the way (the hop count and the segments), and the fields forwarding
// reads. The wire form of the message is raw followed by ttl and segs, encoded:
// protobuf allows fields in any order, and the last value of a scalar wins.
type msg struct {
	raw       []byte // Message fields but ttl (4) and segments (8), encoded
	ttl       uint32
	broadcast bool
	segs      []string
	// replyTo is a request's token, inReplyTo a reply's (request.go); both are in raw
	// too, as they go on unchanged.
	replyTo, inReplyTo string
}

// wireSize is the size of m's Message encoding.
func (m *msg) wireSize() int {
	n := len(m.raw)
	if m.ttl > 0 {
		n += 1 + protowire.SizeVarint(uint64(m.ttl))
	}
	for _, s := range m.segs {
		n += 1 + protowire.SizeBytes(len(s))
	}
	return n
}

// appendWire appends m's Message encoding as field num of the enclosing message.
func (m *msg) appendWire(b []byte, num protowire.Number) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(m.wireSize()))
	b = append(b, m.raw...)
	if m.ttl > 0 {
		b = protowire.AppendTag(b, wire.MessageFieldTTL, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.ttl))
	}
	for _, s := range m.segs {
		b = protowire.AppendTag(b, wire.MessageFieldSegments, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b
}

func sizeField(n int) int { return 1 + protowire.SizeBytes(n) }

// newMsg encodes a message published at this node, in one allocation.
func newMsg(name dataplane.Name, payload []byte, broadcast bool, ttl uint32, origin string, seq uint64, at int64) *msg {
	b := appendPublished(make([]byte, 0, publishedSize(name, len(payload), origin)), name, payload, broadcast, origin, seq, at)
	return &msg{raw: b, ttl: ttl, broadcast: broadcast}
}

// publishedSize bounds the size of a published message's raw encoding.
func publishedSize(name dataplane.Name, payload int, origin string) int {
	// broadcast, and seq and published_unix_nano at their longest
	return sizeField(nameSize(name)) + sizeField(payload) + sizeField(len(origin)) + 2 + 2*(1+binary.MaxVarintLen64)
}

// appendPublished appends the raw encoding of a message published at this node: every
// field but the hop count (msg.ttl) and the segments (none).
func appendPublished(b []byte, name dataplane.Name, payload []byte, broadcast bool, origin string, seq uint64, at int64) []byte {
	nl := nameSize(name)
	b = protowire.AppendTag(b, wire.MessageFieldName, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(nl))
	b = appendName(b, name)
	if len(payload) > 0 {
		b = protowire.AppendTag(b, wire.MessageFieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, payload)
	}
	if broadcast {
		b = protowire.AppendTag(b, wire.MessageFieldBroadcast, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if origin != "" {
		b = protowire.AppendTag(b, wire.MessageFieldOrigin, protowire.BytesType)
		b = protowire.AppendString(b, origin)
	}
	if seq != 0 {
		b = protowire.AppendTag(b, wire.MessageFieldSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	if at != 0 {
		b = protowire.AppendTag(b, wire.MessageFieldPublished, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(at))
	}
	return b
}

func nameSize(n dataplane.Name) int {
	size := 0
	for _, c := range n.Components {
		if c != "" {
			size += sizeField(len(c))
		}
	}
	if n.HasID() {
		size += 1 + protowire.SizeVarint(n.ComponentID)
	}
	return size
}

func appendName(b []byte, n dataplane.Name) []byte {
	for i, c := range n.Components {
		if c != "" {
			b = protowire.AppendTag(b, wire.NameFieldOrg+protowire.Number(i), protowire.BytesType)
			b = protowire.AppendString(b, c)
		}
	}
	if n.HasID() {
		b = protowire.AppendTag(b, wire.NameFieldID, protowire.VarintType)
		b = protowire.AppendVarint(b, n.ComponentID)
	}
	return b
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
		n += sizeField(m.wireSize())
	}
	if o.seq != 0 {
		n += 1 + protowire.SizeVarint(o.seq)
	}
	return n
}

func (o *batchOut) wireSize() int { return sizeField(o.batchSize()) }

func (o *batchOut) appendWire(b []byte) []byte {
	b = protowire.AppendTag(b, wire.FrameFieldBatch, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(o.batchSize()))
	for _, m := range o.msgs {
		b = m.appendWire(b, wire.BatchFieldMessages)
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
		n += sizeField(m.wireSize())
	}
	return n
}

func (o *deliveryOut) appendWire(b []byte) []byte {
	for _, m := range o.msgs {
		b = m.appendWire(b, wire.DeliveryFieldMessages)
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

var errWire = errors.New("malformed frame")

func (f *frameIn) decodeWire(buf mem.Buffer) error {
	f.isBatch, f.seq, f.msgs, f.buf, f.ctrl = false, 0, nil, nil, nil
	data := buf.ReadOnlyData()
	// Which member of the oneof the frame carries: the last one present.
	last := protowire.Number(0)
	for b := data; len(b) > 0; {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			buf.Free()
			return errWire
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			buf.Free()
			return errWire
		}
		if num >= wire.FrameFieldBatch && num <= wire.FrameFieldBatchAck && typ == protowire.BytesType {
			last = num
		}
		b = b[n+m:]
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
	if err := eachField(data, wire.FrameFieldBatch, func(b []byte) error {
		return eachField(b, wire.BatchFieldMessages, func([]byte) error { count++; return nil })
	}); err != nil {
		buf.Free()
		return err
	}
	f.msgs = make([]rxMsg, 0, count)
	// A batch present several times is merged, as protobuf does: its messages
	// concatenated, the last seq winning.
	if err := eachField(data, wire.FrameFieldBatch, f.decodeBatch); err != nil {
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

// decodeMessage reads what forwarding needs from one encoded Message. The fields it
// rewrites (ttl, segments) are cut from the bytes it keeps: free when they come last,
// as the node encodes them; otherwise (another encoder's order) the rest is copied.
func (f *frameIn) decodeMessage(data []byte, r *rxMsg) error {
	var (
		name      []byte
		names     int
		cut       = -1    // offset of the first ttl or segments field
		keptAfter = false // a field to keep follows it
	)
	for b, off := data, 0; len(b) > 0; {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errWire
		}
		v := b[n : n+m]
		strip := false
		switch {
		case num == wire.MessageFieldName && typ == protowire.BytesType:
			nv, _ := protowire.ConsumeBytes(v)
			if names++; names == 1 {
				name = nv
			} else {
				// A message field present twice is merged: the encodings concatenated.
				name = append(append([]byte(nil), name...), nv...)
			}
		case num == wire.MessageFieldBroadcast && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			r.m.broadcast = x != 0
		case num == wire.MessageFieldTTL && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			r.m.ttl = uint32(x)
			strip = true
		case num == wire.MessageFieldSegments && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return fmt.Errorf("%w: a segment is not UTF-8", errWire)
			}
			r.m.segs = append(r.m.segs, string(s))
			strip = true
		case num == wire.MessageFieldOrigin && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return fmt.Errorf("%w: the origin is not UTF-8", errWire)
			}
			r.origin = s
		case (num == wire.MessageFieldReplyTo || num == wire.MessageFieldInReplyTo) && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return fmt.Errorf("%w: a reply token is not UTF-8", errWire)
			}
			if num == wire.MessageFieldReplyTo {
				r.m.replyTo = string(s)
			} else {
				r.m.inReplyTo = string(s)
			}
		}
		switch {
		case strip && cut < 0:
			cut = off
		case !strip && cut >= 0:
			keptAfter = true
		}
		b = b[n+m:]
		off += n + m
	}
	switch {
	case cut < 0:
		r.m.raw = data
	case !keptAfter:
		r.m.raw = data[:cut]
	default:
		r.m.raw = keepFields(data)
	}
	if names == 0 {
		r.bad = fmt.Errorf("%w: name is missing", ErrBadName)
		return nil
	}
	r.name, r.bad = f.names.decode(name)
	return nil
}

// eachField is wire.EachField with the node's error for a malformed frame.
func eachField(b []byte, num protowire.Number, fn func(v []byte) error) error {
	if err := wire.EachField(b, num, fn); !errors.Is(err, wire.ErrMalformed) {
		return err
	}
	return errWire
}

// keepFields copies the fields of an encoded Message but ttl and segments.
func keepFields(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for b := data; len(b) > 0; {
		num, typ, n := wire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if !(num == wire.MessageFieldTTL && typ == protowire.VarintType) && !(num == wire.MessageFieldSegments && typ == protowire.BytesType) {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out
}

// nameCache maps encoded Names to their decoded and checked form: a stream carries
// few names, each many times. One stream's reader owns it.
type nameCache map[string]dataplane.Name

// decode decodes and checks an encoded Name, through the cache.
func (c *nameCache) decode(b []byte) (dataplane.Name, error) {
	if n, ok := (*c)[string(b)]; ok {
		return n, nil
	}
	var (
		comps [3]string
		id    uint64
		hasID bool
	)
	key := b
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return dataplane.Name{}, fmt.Errorf("%w: malformed", ErrBadName)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return dataplane.Name{}, fmt.Errorf("%w: malformed", ErrBadName)
		}
		v := b[n : n+m]
		switch {
		case num >= wire.NameFieldOrg && num <= wire.NameFieldService && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			comps[num-wire.NameFieldOrg] = string(s)
		case num == wire.NameFieldID && typ == protowire.VarintType:
			id, _ = protowire.ConsumeVarint(v)
			hasID = true
		}
		b = b[n+m:]
	}
	p := &nodev1.Name{Org: comps[0], Namespace: comps[1], Service: comps[2]}
	if hasID {
		p.Id = &id
	}
	name, err := nameFromProto(p)
	if err != nil {
		return dataplane.Name{}, err
	}
	if *c == nil || len(*c) >= maxNameCache {
		*c = make(nameCache)
	}
	(*c)[string(key)] = name
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
	if err := eachField(buf.ReadOnlyData(), wire.PublishBatchFieldMessages, p.decodeRequest); err != nil {
		buf.Free()
		return err
	}
	p.buf = buf
	return nil
}

func (p *publishIn) decodeRequest(b []byte) error {
	var (
		r     publishReq
		name  []byte
		names int
	)
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errWire
		}
		v := b[n : n+m]
		switch {
		case num == wire.PublishFieldName && typ == protowire.BytesType:
			nv, _ := protowire.ConsumeBytes(v)
			if names++; names == 1 {
				name = nv
			} else {
				name = append(append([]byte(nil), name...), nv...)
			}
		case num == wire.PublishFieldPayload && typ == protowire.BytesType:
			r.payload, _ = protowire.ConsumeBytes(v)
		case num == wire.PublishFieldBroadcast && typ == protowire.VarintType && !p.requests:
			x, _ := protowire.ConsumeVarint(v)
			r.broadcast = x != 0
		case num == wire.RequestFieldTimeout && typ == protowire.VarintType && p.requests:
			x, _ := protowire.ConsumeVarint(v)
			r.timeoutMs = uint32(x)
		case num == wire.RequestFieldID && typ == protowire.VarintType && p.requests:
			r.id, _ = protowire.ConsumeVarint(v)
		}
		b = b[n+m:]
	}
	if names == 0 {
		r.bad = fmt.Errorf("%w: name is missing", ErrBadName)
	} else {
		r.name, r.bad = p.names.decode(name)
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
	if err := eachField(buf.ReadOnlyData(), wire.RespondBatchFieldAnswers, p.decodeAnswer); err != nil {
		buf.Free()
		return err
	}
	p.buf = buf
	return nil
}

func (p *respondIn) decodeAnswer(b []byte) error {
	var a respondAnswer
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errWire
		}
		if typ == protowire.BytesType {
			switch num {
			case wire.RespondFieldReplyTo:
				a.token, _ = protowire.ConsumeBytes(b[n : n+m])
			case wire.RespondFieldPayload:
				a.payload, _ = protowire.ConsumeBytes(b[n : n+m])
			}
		}
		b = b[n+m:]
	}
	p.answers = append(p.answers, a)
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
type streamAnswer struct {
	id        uint64
	payload   []byte
	responder string
	code      uint32
	err       string
}

func (a *streamAnswer) size() int {
	n := 0
	if len(a.payload) > 0 {
		n += sizeField(len(a.payload))
	}
	if a.responder != "" {
		n += sizeField(len(a.responder))
	}
	if a.id != 0 {
		n += 1 + protowire.SizeVarint(a.id)
	}
	if a.code != 0 {
		n += 1 + protowire.SizeVarint(uint64(a.code))
	}
	if a.err != "" {
		n += sizeField(len(a.err))
	}
	return n
}

func (a *streamAnswer) appendWire(b []byte) []byte {
	b = protowire.AppendTag(b, wire.AnswerBatchFieldResponses, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(a.size()))
	if len(a.payload) > 0 {
		b = protowire.AppendTag(b, wire.AnswerFieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, a.payload)
	}
	if a.responder != "" {
		b = protowire.AppendTag(b, wire.AnswerFieldResponder, protowire.BytesType)
		b = protowire.AppendString(b, a.responder)
	}
	if a.id != 0 {
		b = protowire.AppendTag(b, wire.AnswerFieldID, protowire.VarintType)
		b = protowire.AppendVarint(b, a.id)
	}
	if a.code != 0 {
		b = protowire.AppendTag(b, wire.AnswerFieldCode, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.code))
	}
	if a.err != "" {
		b = protowire.AppendTag(b, wire.AnswerFieldError, protowire.BytesType)
		b = protowire.AppendString(b, a.err)
	}
	return b
}

// answersOut is the RequestResponseBatch of answers sent together.
type answersOut struct{ answers []streamAnswer }

func (o *answersOut) wireSize() int {
	n := 0
	for i := range o.answers {
		n += sizeField(o.answers[i].size())
	}
	return n
}

func (o *answersOut) appendWire(b []byte) []byte {
	for i := range o.answers {
		b = o.answers[i].appendWire(b)
	}
	return b
}

// decodeDelivery decodes a SubscribeResponse for a client of the node (the codec of
// ClientOptions): what protobuf's Unmarshal does, with the response's messages, names,
// payloads and instance ids each allocated once for the whole response instead of once
// per message, and strings repeated from one message to the next (names, origins)
// shared. It reports false, having changed nothing the caller keeps, for anything it
// does not know (an unknown field, a string that is not UTF-8), which protobuf then
// decodes.
func decodeDelivery(data []byte, r *nodev1.SubscribeResponse) bool {
	var id uint64
	count, payloads := 0, 0
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
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n < 0 {
				return false
			}
			count++
			payloads += len(v) // a bound: the payload is part of it
		default:
			return false
		}
		b = b[n:]
	}
	d := deliveryDecoder{
		msgs:  make([]nodev1.Message, count),
		names: make([]nodev1.Name, count),
		ids:   make([]uint64, count),
		arena: make([]byte, 0, payloads),
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
	arena []byte
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
			start := len(d.arena)
			d.arena = append(d.arena, v...)
			m.Payload = d.arena[start:len(d.arena):len(d.arena)]
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
