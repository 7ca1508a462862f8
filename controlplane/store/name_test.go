package store

import (
	"errors"
	"testing"
)

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Name
	}{
		{"org/ns/svc", NewName("org", "ns", "svc")},
		{"org/ns/svc/0", NewName("org", "ns", "svc").WithID(0)},
		{"org/ns/svc/18446744073709551614", NewName("org", "ns", "svc").WithID(NullComponent - 1)},
		// The data plane's null sentinel means "no id".
		{"org/ns/svc/18446744073709551615", NewName("org", "ns", "svc")},
	} {
		got, err := ParseName(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "a/b", "a/b/c/d/e", "a//c", "a/b/c/x", "a/b/c/-1", "a b/c/d", "a/b/\x00"} {
		if _, err := ParseName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestStatusNames(t *testing.T) {
	for _, s := range []LinkStatus{LinkPending, LinkConnecting, LinkApplied, LinkFailed, LinkDeleted} {
		if got, err := ParseLinkStatus(s.String()); err != nil || got != s {
			t.Errorf("link status %s round trip: %v %v", s, got, err)
		}
	}
	for _, s := range []RouteStatus{RoutePending, RouteApplied, RouteFailed, RouteDeleted} {
		if got, err := ParseRouteStatus(s.String()); err != nil || got != s {
			t.Errorf("route status %s round trip: %v %v", s, got, err)
		}
	}
	if _, err := ParseLinkStatus("bogus"); err == nil {
		t.Error("bogus link status parsed")
	}
	if LinkStatus(0).String() != "LinkStatus(0)" || RouteStatus(9).String() != "RouteStatus(9)" {
		t.Error("unknown statuses must print their number")
	}
}

// FuzzParseName: parsing never panics, and what parses prints back to a name that
// parses to the same value.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"org/ns/svc", "a/b/c/1", "a/b/c/18446744073709551615", "//", "a/b/c/d/e", "é/ü/ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("error %v is not ErrInvalidName", err)
			}
			return
		}
		again, err := ParseName(n.String())
		if err != nil || again != n {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, n, n.String(), again, err)
		}
	})
}
