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
		// The server keeps whole seconds, cut down: 1.5s lives 1s, as it does there.
		{"1.5s", lifetime{ttl: time.Second}},
		{"1.999s", lifetime{ttl: time.Second}},
		{"2500ms", lifetime{ttl: 2 * time.Second}},
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

// TestExpiresAtFractionalTTL: a watch expects a message with a fractional Nats-TTL to
// go when the server removes it, a whole second cut down, not later: a registration
// written after that must read as a new entry, not an update.
func TestExpiresAtFractionalTTL(t *testing.T) {
	const tm = int64(1_700_000_000_000_000_000)
	h := nats.Header{}
	h.Set(jetstream.MsgTTLHeader, "1.9s")
	if got, want := expiresAt(h, tm, 0), tm+int64(time.Second); got != want {
		t.Errorf("expiresAt(Nats-TTL 1.9s) = tm%+v, want tm+1s", time.Duration(got-tm))
	}
}
