package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

func TestParseName(t *testing.T) {
	good := map[string]dataplane.Name{
		"org/ns/svc":     dataplane.NewName("org", "ns", "svc"),
		"o.1/n_s/s-v/42": dataplane.NewName("o.1", "n_s", "s-v").WithID(42),
		"org/ns/svc/0":   dataplane.NewName("org", "ns", "svc").WithID(0),
	}
	for s, want := range good {
		got, err := ParseName(s)
		if err != nil || got != want {
			t.Errorf("ParseName(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%q round-trips as %q", s, got.String())
		}
	}
	bad := map[string]string{
		"":                                   "got 1 parts",
		"org/ns":                             "got 2 parts",
		"org/ns/svc/1/2":                     "got 5 parts",
		"org//svc":                           "namespace is empty",
		"org/ns/s v":                         `service "s v" has ' '`,
		"org/ns/svc/x":                       `id "x"`,
		"org/ns/svc/18446744073709551615":    "id",
		"org/ns/" + strings.Repeat("s", 129): "service is 129 bytes",
	}
	for s, want := range bad {
		_, err := ParseName(s)
		if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseName(%q) = %v, want ErrBadName containing %q", s, err, want)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"org/ns/svc", "org/ns/svc/7", "a//b", "x/y/z/-1", "org/ns/s\u00e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("error %v is not ErrBadName", err)
			}
			return
		}
		if n.String() != s && !strings.Contains(s, "/0") && !strings.Contains(s, "/+") {
			// Only a zero-padded or signed id may print differently.
			back, err := ParseName(n.String())
			if err != nil || back != n {
				t.Fatalf("%q parsed to %v, which does not round-trip: %v", s, n, err)
			}
		}
		if _, err := nameFromProto(NameProto(n)); err != nil {
			t.Fatalf("%q: wire form refused: %v", s, err)
		}
	})
}
