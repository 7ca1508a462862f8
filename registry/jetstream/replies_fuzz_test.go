package jetstream

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzParseAck holds parseAck's fast path to a plain JSON decode of the same ack:
// whatever sequence it reads from a well-formed ack, the JSON says too, from the
// registry's own stream and with no error. A reply that is not an ack is an error,
// never a sequence.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"REG","seq":42}`,
		`{"stream":"REG","domain":"hub","seq":7,"duplicate":true}`,
		`{"stream":"OTHER","seq":42}`,
		`{"error":{"code":503,"err_code":10077,"description":"expected stream does not match"}}`,
		`{"stream":"REG","seq":1,"seq":2}`,
		`{"stream":"REG","x":"\"seq\":5,","seq":9}`,
		`{"stream":"REG","seq":18446744073709551615}`,
		`{"stream":"REG","seq":18446744073709551616}`,
		`{"stream":"REG",`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		seq, err := parseAck(d, "REG")
		if err != nil {
			return
		}
		if !json.Valid(d) {
			// A server sends JSON; the fast path may read a sequence from a truncated
			// ack, but never one the ack's own text does not hold at "seq".
			return
		}
		var resp struct {
			Error  *jetstream.APIError `json:"error"`
			Stream string              `json:"stream"`
			Seq    uint64              `json:"seq"`
		}
		if uerr := json.Unmarshal(d, &resp); uerr != nil {
			// Valid JSON of another shape (a seq that overflows, a string where a
			// number goes): the fast path must not have read a sequence from it.
			t.Fatalf("parseAck(%q) = %d, but the ack does not decode: %v", d, seq, uerr)
		}
		if resp.Error != nil || resp.Stream != "REG" || resp.Seq != seq {
			t.Fatalf("parseAck(%q) = %d; the JSON says stream %q, seq %d, error %v", d, seq, resp.Stream, resp.Seq, resp.Error)
		}
	})
}

// FuzzParseSeq holds parseSeq to strconv: it accepts exactly the non-empty runs of up
// to 19 decimal digits (always below 2^64), and reads the same number.
func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"0", "42", "9999999999999999999", "18446744073709551615", "+1", "-1", "1_0", "", "0x10", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseSeq(s)
		want, err := strconv.ParseUint(s, 10, 64)
		digits := err == nil && len(s) <= 19
		if ok != digits || (ok && n != want) {
			t.Fatalf("parseSeq(%q) = %d, %v; strconv reads %d, %v", s, n, ok, want, err)
		}
	})
}

// FuzzParseBatchEnd checks that an end-of-batch status is read only when every count
// it needs is a decimal number, and then as that number: a reader never pages on
// from a count it guessed.
func FuzzParseBatchEnd(f *testing.F) {
	f.Add("3", "120", "500", true)
	f.Add("0", "7", "", false)
	f.Add("", "7", "9", true)
	f.Add("-1", "x", "1e3", true)
	f.Add("18446744073709551616", "1", "1", false)
	f.Fuzz(func(t *testing.T, pending, last, upTo string, withUpTo bool) {
		h := nats.Header{}
		h.Set("Nats-Num-Pending", pending)
		h.Set("Nats-Last-Sequence", last)
		h.Set("Nats-UpTo-Sequence", upTo)
		end, err := parseBatchEnd(h, withUpTo)
		names := []string{"Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"}
		if !withUpTo {
			names = names[:2]
		}
		var want [3]uint64
		valid := true
		for i, name := range names {
			n, perr := strconv.ParseUint(h.Get(name), 10, 64)
			valid = valid && perr == nil
			want[i] = n
		}
		if (err == nil) != valid {
			t.Fatalf("parseBatchEnd(%q, %q, %q, %v) error %v; every count a number: %v", pending, last, upTo, withUpTo, err, valid)
		}
		if err == nil && (end != batchEnd{pending: want[0], last: want[1], upTo: want[2]}) {
			t.Fatalf("parseBatchEnd(%q, %q, %q, %v) = %+v, want %v", pending, last, upTo, withUpTo, end, want)
		}
	})
}
