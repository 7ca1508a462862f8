package wire

import (
	"errors"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The primitives every hand-written decoder here walks a message with. Each
// accepts what protobuf's Unmarshal accepts: unknown fields, and known ones of
// another wire type, are skipped whole; a field number above the largest valid
// one is malformed (protowire.ConsumeTag checks only the low bound).

// ErrMalformed is a message that is not valid protobuf: truncated, or with a
// field number or wire type protobuf refuses.
var ErrMalformed = errors.New("truncated or malformed protobuf")

// ConsumeTag is protowire.ConsumeTag that also refuses a field number above
// protowire.MaxValidNumber, as protobuf does: a message carrying one would be
// passed on as it is, and every decoder downstream would fail on it.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// NextField splits off the first field of b: its number, wire type and value (a
// varint's encoding, or a length-delimited field's contents), and the rest of b.
// Groups and the other wire types come whole, as protobuf skips unknown fields.
func NextField(b []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, err error) {
	// Every field of the hot messages has a one-byte tag, and most values are
	// short: take those without protowire's general decoding.
	if len(b) >= 2 && b[0] < 0x80 && b[0] >= 1<<3 && b[1] < 0x80 {
		num, typ := protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch {
		case typ == protowire.BytesType && 2+int(b[1]) <= len(b):
			return num, typ, b[2 : 2+int(b[1])], b[2+int(b[1]):], nil
		case typ == protowire.VarintType:
			return num, typ, b[1:2], b[2:], nil
		}
	}
	num, typ, n := ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, ErrMalformed
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return 0, 0, nil, nil, ErrMalformed
		}
		return num, typ, v, b[m:], nil
	}
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, nil, ErrMalformed
	}
	return num, typ, b[:m], b[m:], nil
}

// EachField calls fn with the contents of every length-delimited field numbered
// num in b, in order, skipping the other fields. A malformed field is
// ErrMalformed; an error of fn stops the walk and is returned.
func EachField(b []byte, num protowire.Number, fn func(v []byte) error) error {
	for len(b) > 0 {
		got, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		m := protowire.ConsumeFieldValue(got, typ, b[n:])
		if m < 0 {
			return ErrMalformed
		}
		if got == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n : n+m])
			if err := fn(v); err != nil {
				return err
			}
		}
		b = b[n+m:]
	}
	return nil
}

// CountFields counts the length-delimited fields numbered num in b, to size what
// they are decoded into; it stops at the first malformed field.
func CountFields(b []byte, num protowire.Number) int {
	n := 0
	for len(b) > 0 {
		got, typ, _, rest, err := NextField(b)
		if err != nil {
			break
		}
		if got == num && typ == protowire.BytesType {
			n++
		}
		b = rest
	}
	return n
}

// FindField returns the contents of the first length-delimited field numbered
// num in b, nil if there is none or b is malformed before it.
func FindField(b []byte, num protowire.Number) []byte {
	for len(b) > 0 {
		got, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if got == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(got, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}

// DropField returns the encoded message b without its fields numbered num (b
// itself when it has none, or when it is malformed: not ours to judge).
func DropField(b []byte, num protowire.Number) []byte {
	var out []byte
	for i := 0; i < len(b); {
		got, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return b
		}
		m := protowire.ConsumeFieldValue(got, typ, b[i+n:])
		if m < 0 {
			return b
		}
		if got == num && out == nil {
			out = append(make([]byte, 0, len(b)), b[:i]...)
		} else if got != num && out != nil {
			out = append(out, b[i:i+n+m]...)
		}
		i += n + m
	}
	if out == nil {
		return b
	}
	return out
}

// Field numbers of google.protobuf.Duration.
const (
	DurationFieldSeconds protowire.Number = 1
	DurationFieldNanos   protowire.Number = 2
)

// maxDurationSeconds is google.protobuf.Duration's documented range (10,000 years).
const maxDurationSeconds = 315_576_000_000

// Duration is a google.protobuf.Duration being decoded; repeated occurrences
// merge field by field, as protobuf merges a repeated message field.
type Duration struct {
	Set            bool // a duration was present
	Seconds, Nanos int64
}

// Merge decodes one occurrence of the duration into d.
func (d *Duration) Merge(b []byte) error {
	d.Set = true
	for len(b) > 0 {
		num, typ, v, rest, err := NextField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != protowire.VarintType {
			continue
		}
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case DurationFieldSeconds:
			d.Seconds = int64(x)
		case DurationFieldNanos:
			d.Nanos = int64(int32(x))
		}
	}
	return nil
}

// Valid reports whether d is a valid duration by durationpb's rules.
func (d Duration) Valid() bool {
	sec, nanos := d.Seconds, d.Nanos
	switch {
	case sec < -maxDurationSeconds || sec > maxDurationSeconds:
		return false
	case nanos <= -1e9 || nanos >= 1e9:
		return false
	case (sec > 0 && nanos < 0) || (sec < 0 && nanos > 0):
		return false
	}
	return true
}

// AsDuration is durationpb's AsDuration: saturated at time.Duration's range.
func (d Duration) AsDuration() time.Duration {
	sec, nanos := d.Seconds, d.Nanos
	t := time.Duration(sec) * time.Second
	if t/time.Second != time.Duration(sec) {
		if sec < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	sum := t + time.Duration(nanos)
	if (nanos > 0 && sum < t) || (nanos < 0 && sum > t) {
		if nanos < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return sum
}
