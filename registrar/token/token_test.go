package token

import (
	"errors"
	"math"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	for _, v := range []Version{{0, 0}, {1, 1}, {0xdeadbeef, 42}, {math.MaxUint64, math.MaxUint64}} {
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

func TestTokenRejects(t *testing.T) {
	for _, s := range []string{"", "abc", "0000000000000001", "0000000000000001.", "000000000000001.5",
		"00000000000000001.5", "000000000000000g.5", "0000000000000001.x", "0000000000000001.-1",
		"0000000000000001.+1", "0000000000000001.99999999999999999999", "0000000000000001.1.2",
		"0000000000000001.05", "000000000000000A.5"} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0000000000000001.5", "ffffffffffffffff.18446744073709551615", "x.y", "0000000000000001.+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		// Every accepted token is canonical: it renders back to itself.
		if got := v.String(); got != s {
			t.Fatalf("Parse(%q) = %v, which renders as %q", s, v, got)
		}
	})
}
