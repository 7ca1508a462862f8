package wire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the switchboard.node.v1 messages the data-plane node encodes
// and decodes by hand (dataplane/node's forwarding path and its client codec).
// The node keeps a forwarded message's bytes as it received them: it needs the
// numbers to read the few fields forwarding looks at and to rewrite the hop count
// and the segments.

// Field numbers of LinkFrame: the members of its oneof frame. The node decodes a
// batch by hand and the other frames with protobuf, after finding which member
// the frame carries.
const (
	FrameFieldBatch       protowire.Number = 1
	FrameFieldSubscribe   protowire.Number = 2
	FrameFieldUnsubscribe protowire.Number = 3
	FrameFieldAck         protowire.Number = 4
	FrameFieldRelink      protowire.Number = 5
	FrameFieldBatchAck    protowire.Number = 6
)

// Field numbers of Batch.
const (
	BatchFieldMessages protowire.Number = 1
	BatchFieldSeq      protowire.Number = 2
)

// Field numbers of Message.
const (
	MessageFieldName         protowire.Number = 1
	MessageFieldPayload      protowire.Number = 2
	MessageFieldBroadcast    protowire.Number = 3
	MessageFieldTTL          protowire.Number = 4
	MessageFieldOrigin       protowire.Number = 5
	MessageFieldSeq          protowire.Number = 6
	MessageFieldPublished    protowire.Number = 7 // published_unix_nano
	MessageFieldSegments     protowire.Number = 8
	MessageFieldReplyTo      protowire.Number = 9
	MessageFieldInReplyTo    protowire.Number = 10
	MessageFieldNoResponders protowire.Number = 11
)

// Field numbers of Name: its three components, in order, and its instance id.
const (
	NameFieldOrg       protowire.Number = 1
	NameFieldNamespace protowire.Number = 2
	NameFieldService   protowire.Number = 3
	NameFieldID        protowire.Number = 4
)

// Field numbers of SubscribeResponse, a delivery to a local subscriber.
const (
	DeliveryFieldID       protowire.Number = 1 // subscription_id
	DeliveryFieldMessages protowire.Number = 2
)

// Field numbers of PublishBatch and PublishRequest. A RequestBatch has its
// RequestRequests where PublishBatch has its messages, and a RequestRequest has
// the name and the payload where PublishRequest has them (the node decodes both
// with one decoder), with a timeout and an id of its own.
const (
	PublishBatchFieldMessages protowire.Number = 1
	PublishFieldName          protowire.Number = 1
	PublishFieldPayload       protowire.Number = 2
	PublishFieldBroadcast     protowire.Number = 3

	RequestFieldTimeout protowire.Number = 3 // timeout_ms
	RequestFieldID      protowire.Number = 4
)

// Field numbers of RespondBatch and RespondRequest.
const (
	RespondBatchFieldAnswers protowire.Number = 1
	RespondFieldReplyTo      protowire.Number = 1
	RespondFieldPayload      protowire.Number = 2
)

// Field numbers of RequestResponseBatch and RequestResponse: the answers to a
// RequestStream's requests.
const (
	AnswerBatchFieldResponses protowire.Number = 1
	AnswerFieldPayload        protowire.Number = 1
	AnswerFieldResponder      protowire.Number = 2
	AnswerFieldID             protowire.Number = 3
	AnswerFieldCode           protowire.Number = 4
	AnswerFieldError          protowire.Number = 5
)

// The forwarding path: a message is decoded once, where it enters the node's
// network (Publish), into its wire form, and from then on every node passes that
// form on. A node that receives a batch reads only what forwarding needs from each
// message (DecodeMessage) and keeps the rest as the bytes it received; the
// outgoing batch is those bytes with the hop count and the segments appended
// (Message.AppendField): protobuf allows fields in any order, and the last value of a
// scalar wins.

// SizeField is the size of a length-delimited field of n bytes with a one-byte tag.
func SizeField(n int) int { return 1 + protowire.SizeBytes(n) }

// Name is a switchboard.node.v1.Name: its three components and its instance id.
type Name struct {
	Components [3]string
	ID         uint64
	HasID      bool
}

// NameSize is the size of n's Name encoding.
func NameSize(n Name) int {
	size := 0
	for _, c := range n.Components {
		if c != "" {
			size += SizeField(len(c))
		}
	}
	if n.HasID {
		size += 1 + protowire.SizeVarint(n.ID)
	}
	return size
}

// AppendName appends n's Name encoding.
func AppendName(b []byte, n Name) []byte {
	for i, c := range n.Components {
		if c != "" {
			b = protowire.AppendTag(b, NameFieldOrg+protowire.Number(i), protowire.BytesType)
			b = protowire.AppendString(b, c)
		}
	}
	if n.HasID {
		b = protowire.AppendTag(b, NameFieldID, protowire.VarintType)
		b = protowire.AppendVarint(b, n.ID)
	}
	return b
}

// DecodeName decodes an encoded Name as protobuf does (unknown fields and known
// ones of another wire type skipped, the last value winning); malformed input is
// ErrMalformed.
func DecodeName(b []byte) (Name, error) {
	var n Name
	for len(b) > 0 {
		num, typ, l := ConsumeTag(b)
		if l < 0 {
			return Name{}, ErrMalformed
		}
		m := protowire.ConsumeFieldValue(num, typ, b[l:])
		if m < 0 {
			return Name{}, ErrMalformed
		}
		v := b[l : l+m]
		switch {
		case num >= NameFieldOrg && num <= NameFieldService && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			n.Components[num-NameFieldOrg] = string(s)
		case num == NameFieldID && typ == protowire.VarintType:
			n.ID, _ = protowire.ConsumeVarint(v)
			n.HasID = true
		}
		b = b[l+m:]
	}
	return n, nil
}

// PublishedSize bounds the size of AppendPublished's encoding.
func PublishedSize(name Name, payload int, origin string) int {
	// broadcast, and seq and published_unix_nano at their longest
	return SizeField(NameSize(name)) + SizeField(payload) + SizeField(len(origin)) + 2 + 2*(1+protowire.SizeVarint(1<<63))
}

// AppendPublished appends the encoding of a message published at this node, but
// for the two fields forwarding rewrites: the hop count and the segments (none).
func AppendPublished(b []byte, name Name, payload []byte, broadcast bool, origin string, seq uint64, at int64) []byte {
	b = protowire.AppendTag(b, MessageFieldName, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(NameSize(name)))
	b = AppendName(b, name)
	if len(payload) > 0 {
		b = protowire.AppendTag(b, MessageFieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, payload)
	}
	if broadcast {
		b = protowire.AppendTag(b, MessageFieldBroadcast, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if origin != "" {
		b = protowire.AppendTag(b, MessageFieldOrigin, protowire.BytesType)
		b = protowire.AppendString(b, origin)
	}
	if seq != 0 {
		b = protowire.AppendTag(b, MessageFieldSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	if at != 0 {
		b = protowire.AppendTag(b, MessageFieldPublished, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(at))
	}
	return b
}

// Message is a Message as the forwarding path holds it: its wire form without the
// two fields that change on the way (the hop count and the segments), and the
// fields forwarding reads. Its encoding is Raw followed by TTL and Segs.
type Message struct {
	Raw       []byte // the Message's fields but ttl and segments, encoded
	TTL       uint32
	Broadcast bool
	Segs      []string
	// ReplyTo is a request's token, InReplyTo a reply's; both are in Raw too, as
	// they go on unchanged.
	ReplyTo, InReplyTo string
}

// Size is the size of m's Message encoding.
func (m *Message) Size() int {
	n := len(m.Raw)
	if m.TTL > 0 {
		n += 1 + protowire.SizeVarint(uint64(m.TTL))
	}
	for _, s := range m.Segs {
		n += 1 + protowire.SizeBytes(len(s))
	}
	return n
}

// AppendField appends m's Message encoding as field num of the enclosing message.
func (m *Message) AppendField(b []byte, num protowire.Number) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(m.Size()))
	b = append(b, m.Raw...)
	if m.TTL > 0 {
		b = protowire.AppendTag(b, MessageFieldTTL, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.TTL))
	}
	for _, s := range m.Segs {
		b = protowire.AppendTag(b, MessageFieldSegments, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b
}

// DecodeMessage reads what forwarding needs from one encoded Message into m,
// which is zero, and returns the encoding of its name (several occurrences
// merged; hasName false for none) and its origin, both in data. The fields
// forwarding rewrites (ttl, segments) are cut from m.Raw: free when they come
// last, as AppendField writes them; otherwise (another encoder's order) the rest
// is copied. A string that is not UTF-8 wraps ErrMalformed.
func DecodeMessage(data []byte, m *Message) (name []byte, hasName bool, origin []byte, err error) {
	var (
		names     int
		cut       = -1    // offset of the first ttl or segments field
		keptAfter = false // a field to keep follows it
	)
	for b, off := data, 0; len(b) > 0; {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return nil, false, nil, ErrMalformed
		}
		l := protowire.ConsumeFieldValue(num, typ, b[n:])
		if l < 0 {
			return nil, false, nil, ErrMalformed
		}
		v := b[n : n+l]
		strip := false
		switch {
		case num == MessageFieldName && typ == protowire.BytesType:
			nv, _ := protowire.ConsumeBytes(v)
			if names++; names == 1 {
				name = nv
			} else {
				// A message field present twice is merged: the encodings concatenated.
				name = append(append([]byte(nil), name...), nv...)
			}
		case num == MessageFieldBroadcast && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			m.Broadcast = x != 0
		case num == MessageFieldTTL && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			m.TTL = uint32(x)
			strip = true
		case num == MessageFieldSegments && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return nil, false, nil, fmt.Errorf("%w: a segment is not UTF-8", ErrMalformed)
			}
			m.Segs = append(m.Segs, string(s))
			strip = true
		case num == MessageFieldOrigin && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return nil, false, nil, fmt.Errorf("%w: the origin is not UTF-8", ErrMalformed)
			}
			origin = s
		case (num == MessageFieldReplyTo || num == MessageFieldInReplyTo) && typ == protowire.BytesType:
			s, _ := protowire.ConsumeBytes(v)
			if !utf8.Valid(s) {
				return nil, false, nil, fmt.Errorf("%w: a reply token is not UTF-8", ErrMalformed)
			}
			if num == MessageFieldReplyTo {
				m.ReplyTo = string(s)
			} else {
				m.InReplyTo = string(s)
			}
		}
		switch {
		case strip && cut < 0:
			cut = off
		case !strip && cut >= 0:
			keptAfter = true
		}
		b = b[n+l:]
		off += n + l
	}
	switch {
	case cut < 0:
		m.Raw = data
	case !keptAfter:
		m.Raw = data[:cut]
	default:
		m.Raw = keepFields(data)
	}
	return name, names > 0, origin, nil
}

// keepFields copies the fields of an encoded Message but ttl and segments.
func keepFields(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for b := data; len(b) > 0; {
		num, typ, n := ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if !(num == MessageFieldTTL && typ == protowire.VarintType) && !(num == MessageFieldSegments && typ == protowire.BytesType) {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out
}

// FrameMember returns the member of a LinkFrame's oneof that the encoded frame
// carries: the last one present, as protobuf reads it; 0 for none.
func FrameMember(data []byte) (protowire.Number, error) {
	last := protowire.Number(0)
	for b := data; len(b) > 0; {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return 0, ErrMalformed
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0, ErrMalformed
		}
		if num >= FrameFieldBatch && num <= FrameFieldBatchAck && typ == protowire.BytesType {
			last = num
		}
		b = b[n+m:]
	}
	return last, nil
}

// PublishRequest is an encoded PublishRequest, or RequestRequest, decoded but for
// its name (Name, the encoding, several occurrences merged) and its payload,
// which stays in the encoded form.
type PublishRequest struct {
	Name      []byte
	HasName   bool
	Payload   []byte
	Broadcast bool   // a PublishRequest's
	TimeoutMs uint32 // a RequestRequest's
	ID        uint64 // a RequestRequest's
}

// DecodePublishRequest decodes a PublishRequest, or with request a RequestRequest.
func DecodePublishRequest(b []byte, request bool) (PublishRequest, error) {
	var (
		r     PublishRequest
		names int
	)
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return r, ErrMalformed
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return r, ErrMalformed
		}
		v := b[n : n+m]
		switch {
		case num == PublishFieldName && typ == protowire.BytesType:
			nv, _ := protowire.ConsumeBytes(v)
			if names++; names == 1 {
				r.Name = nv
			} else {
				r.Name = append(append([]byte(nil), r.Name...), nv...)
			}
		case num == PublishFieldPayload && typ == protowire.BytesType:
			r.Payload, _ = protowire.ConsumeBytes(v)
		case num == PublishFieldBroadcast && typ == protowire.VarintType && !request:
			x, _ := protowire.ConsumeVarint(v)
			r.Broadcast = x != 0
		case num == RequestFieldTimeout && typ == protowire.VarintType && request:
			x, _ := protowire.ConsumeVarint(v)
			r.TimeoutMs = uint32(x)
		case num == RequestFieldID && typ == protowire.VarintType && request:
			r.ID, _ = protowire.ConsumeVarint(v)
		}
		b = b[n+m:]
	}
	r.HasName = names > 0
	return r, nil
}

// DecodeRespondRequest decodes a RespondRequest: its reply token and payload, both
// in b.
func DecodeRespondRequest(b []byte) (token, payload []byte, err error) {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return nil, nil, ErrMalformed
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, nil, ErrMalformed
		}
		if typ == protowire.BytesType {
			switch num {
			case RespondFieldReplyTo:
				token, _ = protowire.ConsumeBytes(b[n : n+m])
			case RespondFieldPayload:
				payload, _ = protowire.ConsumeBytes(b[n : n+m])
			}
		}
		b = b[n+m:]
	}
	return token, payload, nil
}

// Answer is a RequestResponse: the answer to one request of a RequestStream.
type Answer struct {
	ID        uint64
	Payload   []byte
	Responder string
	Code      uint32
	Error     string
}

// Size is the size of a's RequestResponse encoding.
func (a *Answer) Size() int {
	n := 0
	if len(a.Payload) > 0 {
		n += SizeField(len(a.Payload))
	}
	if a.Responder != "" {
		n += SizeField(len(a.Responder))
	}
	if a.ID != 0 {
		n += 1 + protowire.SizeVarint(a.ID)
	}
	if a.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(a.Code))
	}
	if a.Error != "" {
		n += SizeField(len(a.Error))
	}
	return n
}

// AppendBatchItem appends a as an item of a RequestResponseBatch.
func (a *Answer) AppendBatchItem(b []byte) []byte {
	b = protowire.AppendTag(b, AnswerBatchFieldResponses, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(a.Size()))
	if len(a.Payload) > 0 {
		b = protowire.AppendTag(b, AnswerFieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, a.Payload)
	}
	if a.Responder != "" {
		b = protowire.AppendTag(b, AnswerFieldResponder, protowire.BytesType)
		b = protowire.AppendString(b, a.Responder)
	}
	if a.ID != 0 {
		b = protowire.AppendTag(b, AnswerFieldID, protowire.VarintType)
		b = protowire.AppendVarint(b, a.ID)
	}
	if a.Code != 0 {
		b = protowire.AppendTag(b, AnswerFieldCode, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.Code))
	}
	if a.Error != "" {
		b = protowire.AppendTag(b, AnswerFieldError, protowire.BytesType)
		b = protowire.AppendString(b, a.Error)
	}
	return b
}
