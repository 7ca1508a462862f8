package endpoint

import (
	"encoding/json"
	"net/netip"
	"regexp"
	"testing"
)

func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"", "never", "30s", "1m", "0.5s", "-1s", "1h2m3s", "9999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ttl, err := ParseTTL(s)
		if err != nil {
			return
		}
		if ttl.check() != nil {
			t.Fatalf("ParseTTL(%q) accepted %v, which check rejects", s, ttl)
		}
		back, err := ParseTTL(ttl.String())
		if err != nil || back != ttl {
			t.Fatalf("ParseTTL(String(%v)) = %v, %v", ttl, back, err)
		}
	})
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":8080,"priority":1,"annotations":{"a":"b"},"ttl":"30s"}`))
	f.Add([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"::1","port":0,"priority":255,"ttl":"never"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Add([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"::1","port":1,"priority":1,"node":"n\u0085","annotations":{"a":"x\ny"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeJSON(b)
		if err != nil {
			return
		}
		// Whatever decodes and validates must survive the JSON and proto forms intact.
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeJSON(out)
		if err != nil || !Equal(back, e) {
			t.Fatalf("JSON round trip of %s: %+v, %v", out, back, err)
		}
		// A request is held to the write rules: the proto form converts intact, and
		// FromProto accepts it exactly when Validate does.
		p, err := FromProtoUnchecked(e.ToProto())
		if err != nil || !Equal(p, e) || p.ValidateRead() != nil {
			t.Fatalf("proto round trip of %+v: %+v, %v", e, p, err)
		}
		if e.Validate() != nil {
			if _, err := FromProto(e.ToProto()); err == nil {
				t.Fatalf("FromProto accepted %+v, which Validate refuses", e)
			}
			return
		}
		p, err = FromProto(e.ToProto())
		if err != nil || !Equal(p, e) {
			t.Fatalf("proto round trip of %+v: %+v, %v", e, p, err)
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("prod", "web", "http", "10.0.0.2", 8080, 1, "k", "v")
	f.Add("", "9", "a.b", "::ffff:1.2.3.4", -1, 0, "bad key", "\xff")
	f.Fuzz(func(t *testing.T, cluster, service, protocol, address string, port, priority int, k, v string) {
		e := Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: priority, Annotations: map[string]string{k: v}}
		if err := e.Validate(); err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("Validate returned %T, want *FieldError", err)
			}
			return
		}
		// A valid endpoint has a usable key: 16 hex digits, stable.
		if id := e.InstanceID(); len(id) != 16 || id != e.Key().InstanceID() {
			t.Fatalf("InstanceID = %q", id)
		}
	})
}

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"web", "a-b_c9", "9a", "", "a.b", "ü", "A"} {
		f.Add(s)
	}
	re := regexp.MustCompile(namePattern)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}

func FuzzValidAnnotationKey(f *testing.F) {
	for _, s := range []string{"zone", "a", "a.b/c-d_e", "-a", "a-", "", "__meta_x", "ü", "a b", "9"} {
		f.Add(s)
	}
	re := regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9._/-]*[a-zA-Z0-9])?$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validAnnotationKey(s), re.MatchString(s); got != want {
			t.Fatalf("validAnnotationKey(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}

// FuzzCanonicalAddress holds canonicalAddress's shortcut for strings without a colon
// to the whole rule: an address that parses (without a zone) is spelled as netip
// spells it; anything else is kept as it is.
func FuzzCanonicalAddress(f *testing.F) {
	for _, s := range []string{"", "10.0.0.1", "010.0.0.1", "1.2.3.4%eth0", "2001:DB8::1", "::ffff:1.2.3.4", "fe80::1%eth0", "web.local", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := s
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			want = a.String()
		}
		if got := canonicalAddress(s); got != want {
			t.Fatalf("canonicalAddress(%q) = %q, want %q", s, got, want)
		}
	})
}
