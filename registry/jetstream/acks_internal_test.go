package jetstream

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParseAck reads acks in every shape the server sends, and refuses what is not
// an ack, as encoding/json would.
func TestParseAck(t *testing.T) {
	for _, c := range []struct {
		in      string
		seq     uint64
		errCode jetstream.ErrorCode // 0: no API error
		invalid bool
		wrong   bool   // stored by another stream
		stream  string // the registry's stream; "" is S
	}{
		{in: `{"stream":"S","seq":42}`, seq: 42},
		{in: `{"stream":"S","domain":"hub","seq":7,"duplicate":true}`, seq: 7},
		{in: `{"stream":"S","seq":18446744073709551615}`, seq: 18446744073709551615},
		{in: `{"stream":"error","seq":3}`, seq: 3, stream: "error"}, // a stream named error: the slow path
		{in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"},"stream":"S","seq":0}`, errCode: 10071},
		{in: `{"error":{"code":503,"err_code":10008,"description":"stream offline"}}`, errCode: 10008},
		{in: `{"stream":"S","seq":12x}`, invalid: true},
		{in: `{"stream":"S2","seq":4}`, wrong: true},
		{in: `{"stream":"T","seq":4}`, wrong: true},
		{in: `{"stream":"T","domain":"hub","seq":4,"duplicate":true}`, wrong: true},
		{in: `{"stream":"","seq":4}`, invalid: true},
		{in: `{"seq":5}`, invalid: true},
		{in: ``, invalid: true},
	} {
		stream := c.stream
		if stream == "" {
			stream = "S"
		}
		seq, err := parseAck([]byte(c.in), stream)
		var apiErr *jetstream.APIError
		switch {
		case c.wrong:
			if !errors.Is(err, ErrWrongStream) {
				t.Errorf("%s: got %d, %v; want ErrWrongStream", c.in, seq, err)
			}
		case c.invalid:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("%s: got %d, %v; want ErrInvalidJSAck", c.in, seq, err)
			}
		case c.errCode != 0:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != c.errCode {
				t.Errorf("%s: got %d, %v; want API error %d", c.in, seq, err, c.errCode)
			}
		case err != nil || seq != c.seq:
			t.Errorf("%s: got %d, %v; want %d", c.in, seq, err, c.seq)
		}
	}
}
