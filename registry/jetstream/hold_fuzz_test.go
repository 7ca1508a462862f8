package jetstream

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzHoldID holds the readers of hold IDs to one another: an owner header names a
// hold exactly when parseHoldID accepts its value; the liveness subject of an
// accepted ID reads back as that ID, is one subject token longer than the prefix and
// never an entry subject; and holdOf accepts only the liveness subject of the ID it
// returns.
func FuzzHoldID(f *testing.F) {
	for _, s := range []string{
		"0123456789abcdef0123456789abcdef",
		"0123456789ABCDEF0123456789abcdef",
		"0123456789abcdef0123456789abcde",
		"0123456789abcdef0123456789abcdef0",
		"0123456789abcdef.123456789abcdef",
		"t1.reg._hold.0123456789abcdef0123456789abcdef",
		"t1.reg._hold.0123456789abcdef0123456789abcdeg",
		"t1.reg.prod.http.web.10_0_0_1.0123456789abcdef",
		"",
	} {
		f.Add(s)
	}
	subj, _ := NewSubjects("t1.reg")
	f.Fuzz(func(t *testing.T, v string) {
		id, ok := parseHoldID(v)
		if owner, named := ownerOf(nats.Header{HoldHeader: {v}}); named != ok || owner != id {
			t.Fatalf("ownerOf(%q) = %q, %v; parseHoldID = %q, %v", v, owner, named, id, ok)
		}
		if ok {
			if string(id) != v {
				t.Fatalf("parseHoldID(%q) = %q", v, id)
			}
			s := subj.liveness(id)
			if back, ok := subj.holdOf(s); !ok || back != id {
				t.Fatalf("holdOf(%q) = %q, %v; want %q", s, back, ok, id)
			}
			if subj.entryShaped(s) {
				t.Fatalf("liveness subject %q is entry-shaped", s)
			}
			if _, err := subj.Parse(s); err == nil {
				t.Fatalf("liveness subject %q parses as an entry subject", s)
			}
		}
		if back, ok := subj.holdOf(v); ok && subj.liveness(back) != v {
			t.Fatalf("holdOf(%q) = %q, whose liveness subject is %q", v, back, subj.liveness(back))
		}
	})
}
