package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestLifetimeOf(t *testing.T) {
	for _, tc := range []struct {
		ttl  string
		want lifetime
	}{
		{"", lifetime{}},
		{"never", lifetime{never: true}},
		{"NEVER", lifetime{never: true}},
		{"30s", lifetime{ttl: 30 * time.Second}},
		{"1h0m0s", lifetime{ttl: time.Hour}},
		{"90", lifetime{ttl: 90 * time.Second}},
		{"0.5s", lifetime{never: true}}, // the server refuses it; assume the worst
		{"soon", lifetime{never: true}},
	} {
		h := nats.Header{}
		if tc.ttl != "" {
			h.Set(jetstream.MsgTTLHeader, tc.ttl)
		}
		if got := lifetimeOf(h); got != tc.want {
			t.Errorf("lifetimeOf(Nats-TTL %q) = %+v, want %+v", tc.ttl, got, tc.want)
		}
	}
}

func TestLifetimeOrder(t *testing.T) {
	// Shortest first: a TTL is capped by MaxAge, which "no TTL" follows, and "never"
	// outlives MaxAge.
	order := []lifetime{{ttl: time.Second}, {ttl: time.Hour}, {}, {never: true}}
	for i, a := range order {
		for j, b := range order {
			if got, want := a.longer(b), i > j; got != want {
				t.Errorf("%+v.longer(%+v) = %v, want %v", a, b, got, want)
			}
		}
	}
}
