package token

import (
	"errors"
	"math"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	for _, v := range []Version{{0, 0, 0, false}, {1, 1, 0, false}, {0xdeadbeef, 42, 0, false}, {math.MaxUint64, math.MaxUint64, 0, false},
		{0, 0, 0, true}, {1, 2, 3, true}, {0xdeadbeef, 42, 0xfeedface12345678, true}, {math.MaxUint64, math.MaxUint64, math.MaxUint64, true}} {
		s := v.String()
		if len(s) < 18 {
			t.Fatalf("%v renders as %q, too short", v, s)
		}
		got, err := Parse(s)
		if err != nil || got != v {
			t.Fatalf("Parse(%q) = %v, %v; want %v", s, got, err, v)
		}
	}
}

// The two-part tokens of registrars from before digests are still read: as
// versions without a digest, which no other replica resumes from.
func TestTokenWithoutDigest(t *testing.T) {
	v, err := Parse("00000000000000ab.7")
	if err != nil || v != (Version{Epoch: 0xab, Seq: 7}) {
		t.Fatalf("Parse = %v, %v; want epoch ab, seq 7, no digest", v, err)
	}
	v, err = Parse("00000000000000ab.7.0000000000000000")
	if err != nil || v != (Version{Epoch: 0xab, Seq: 7, HasDigest: true}) {
		t.Fatalf("Parse = %v, %v; want epoch ab, seq 7, digest 0", v, err)
	}
}

func TestTokenRejects(t *testing.T) {
	for _, s := range []string{"", "abc", "0000000000000001", "0000000000000001.", "000000000000001.5",
		"00000000000000001.5", "000000000000000g.5", "0000000000000001.x", "0000000000000001.-1",
		"0000000000000001.+1", "0000000000000001.99999999999999999999", "0000000000000001.1.2",
		"0000000000000001.05", "000000000000000A.5", "0000000000000001.5.", "0000000000000001.5.000000000000000",
		"0000000000000001.5.00000000000000000", "0000000000000001.5.000000000000000A", "0000000000000001.5.0000000000000001.1",
		".5.0000000000000001", "0000000000000001..0000000000000001", "0000000000000001.5.+000000000000001"} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0000000000000001.5", "ffffffffffffffff.18446744073709551615", "x.y", "0000000000000001.+1",
		"0000000000000001.5.00000000000000ff", "ffffffffffffffff.0.ffffffffffffffff", "0000000000000001.5.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(%q) error %v is not ErrMalformed", s, err)
			}
			return
		}
		// Every accepted token is canonical: it renders back to itself, so no two
		// spellings are accepted for one version.
		if got := v.String(); got != s {
			t.Fatalf("Parse(%q) = %v, which renders as %q", s, v, got)
		}
	})
}
