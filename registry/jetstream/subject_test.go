package jetstream_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

func subjects(t testing.TB) sbjs.Subjects {
	s, err := sbjs.NewSubjects(sbjs.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSubjectForAndParseRoundTrip(t *testing.T) {
	s := subjects(t)
	for _, tc := range []struct {
		addr, token string
	}{
		{"10.0.0.1", "10_0_0_1"},
		{"0.0.0.0", "0_0_0_0"},
		{"2001:db8::1", "2001:db8::1"},
		{"::", "::"},
		{"::1", "::1"},
		{"fe80::1:2:3:4", "fe80::1:2:3:4"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{"::ffff:10.1.2.3", "::ffff:10_1_2_3"},
	} {
		k := endpoint.Key{Cluster: "prod-eu", Service: "api_gw", Protocol: "grpc", Address: tc.addr, Port: 9443}
		subj := s.For(k)
		want := "switchboard.registration.v1.prod-eu.grpc.api_gw." + tc.token + "." + k.InstanceID()
		if subj != want {
			t.Errorf("For(%s) = %q, want %q", tc.addr, subj, want)
			continue
		}
		sk, err := s.Parse(subj)
		if err != nil {
			t.Errorf("Parse(%q): %v", subj, err)
			continue
		}
		if !sk.Matches(k) || sk.Address != tc.addr {
			t.Errorf("Parse(%q) = %+v, does not match %+v", subj, sk, k)
		}
		other := k
		other.Port++
		if sk.Matches(other) {
			t.Errorf("subject of port %d matches port %d", k.Port, other.Port)
		}
		// Earlier versions wrote ':' as '-': still parsed, and listed among the
		// subjects an unregister clears.
		legacy := "switchboard.registration.v1.prod-eu.grpc.api_gw." + legacyToken(tc.addr) + "." + k.InstanceID()
		if sk, err := s.Parse(legacy); err != nil || !sk.Matches(k) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", legacy, sk, err, k)
		}
		if forms := s.Forms(k); forms[0] != want || !slices.Contains(forms, legacy) || len(forms) != 1+btoi(legacy != want) {
			t.Errorf("Forms(%s) = %q, want %q then %q", k, forms, want, legacy)
		}
	}
}

// legacyToken is the address spelling of earlier versions: '.' and ':' both replaced.
func legacyToken(addr string) string { return strings.NewReplacer(".", "_", ":", "-").Replace(addr) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFormsOfPortZero: an unregister of port 0 also clears the subject of an entry
// written with a null port, whose id hashes "%!d(<nil>)" in place of the port.
func TestFormsOfPortZero(t *testing.T) {
	s := subjects(t)
	k := endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.9", Port: 0}
	p := sbjs.DefaultPrefix + ".prod.http.web.10_0_0_9."
	want := []string{p + k.InstanceID(), p + ccmID("prod", "web", "http", "10.0.0.9", nil)}
	if got := s.Forms(k); !slices.Equal(got, want) {
		t.Errorf("Forms(%s) = %q, want %q", k, got, want)
	}
	k.Port = 80
	if got := s.Forms(k); len(got) != 1 {
		t.Errorf("Forms(%s) = %q, want one subject", k, got)
	}
}

func TestParseRejects(t *testing.T) {
	s := subjects(t)
	id := endpoint.Key{Cluster: "c", Service: "s", Protocol: "p", Address: "10.0.0.1", Port: 1}.InstanceID()
	p := sbjs.DefaultPrefix + "."
	for _, tc := range []struct{ subject, want string }{
		{"other.prefix.c.p.s.10_0_0_1." + id, "not under prefix"},
		{p + "c.p.s.10_0_0_1", "want 5 tokens"},
		{p + "c.p.s.10_0_0_1." + id + ".extra", "want 5 tokens"},
		{p + "9c.p.s.10_0_0_1." + id, "cluster"},
		{p + "c.*.s.10_0_0_1." + id, "protocol"},
		{p + "c.p..10_0_0_1." + id, "service"},
		{p + "c.p.s.10_0_0_300." + id, "address token"},
		{p + "c.p.s.10.0.0.1." + id, "want 5 tokens"},
		{p + "c.p.s.2001:db8--1." + id, "mixes"},
		{p + "c.p.s.fe80--1%eth0." + id, "zone"},
		{p + "c.p.s.fe80::1%eth0." + id, "zone"},
		{p + "c.p.s.010_0_0_1." + id, "address token"},
		{p + "c.p.s.10_0_0_1.ABCDEF0123456789", "instance id"},
		{p + "c.p.s.10_0_0_1.123", "instance id"},
	} {
		if _, err := s.Parse(tc.subject); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", tc.subject, err, tc.want)
		}
	}
}

// TestParseOtherSpellings: another writer keeps an IPv6 address as it was written, in
// the address token and in the id token's hash. Parse reads any spelling, gives the
// address in canonical form beside the spelling, and the subject is one an unregister
// of the canonical key clears (OtherSpelling), with the id of its port, or of a null
// port for port 0.
func TestParseOtherSpellings(t *testing.T) {
	s := subjects(t)
	p := sbjs.DefaultPrefix + ".prod.http.web."
	for _, tc := range []struct{ token, written, canon string }{
		{"2001:DB8::1", "2001:DB8::1", "2001:db8::1"},
		{"2001:0db8:0:0::1", "2001:0db8:0:0::1", "2001:db8::1"},
		{"2001:db8:0:0:0:0:0:1", "2001:db8:0:0:0:0:0:1", "2001:db8::1"},
		{"2001-DB8--1", "2001:DB8::1", "2001:db8::1"},
		{"2001-db8-0-0-0-0-0-1", "2001:db8:0:0:0:0:0:1", "2001:db8::1"},
		{"::FFFF:10_1_2_3", "::FFFF:10.1.2.3", "::ffff:10.1.2.3"},
		{"::ffff:a01:203", "::ffff:a01:203", "::ffff:10.1.2.3"},
	} {
		k := endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: tc.canon, Port: 80}
		subject := p + tc.token + "." + ccmID("prod", "web", "http", tc.written, 80)
		sk, err := s.Parse(subject)
		if err != nil {
			t.Errorf("Parse(%q): %v", subject, err)
			continue
		}
		if sk.Address != tc.canon || sk.Written != tc.written || sk.Canonical() || !sk.Matches(k) {
			t.Errorf("Parse(%q) = %+v (canonical %v), want address %s written %s, matching %s", subject, sk, sk.Canonical(), tc.canon, tc.written, k)
		}
		if !s.OtherSpelling(subject, k) {
			t.Errorf("OtherSpelling(%q, %s) = false", subject, k)
		}
		other := k
		other.Port = 81
		if s.OtherSpelling(subject, other) || s.OtherSpelling(p+tc.token+"."+k.InstanceID(), k) {
			t.Errorf("OtherSpelling(%q) holds for port 81 or for the canonical id", subject)
		}
		zero := k
		zero.Port = 0
		if null := p + tc.token + "." + ccmID("prod", "web", "http", tc.written, nil); !s.OtherSpelling(null, zero) || s.OtherSpelling(null, k) {
			t.Errorf("OtherSpelling(%q): want it for port 0 only", null)
		}
		for _, form := range s.Forms(zero) {
			if s.OtherSpelling(form, zero) {
				t.Errorf("OtherSpelling(%q, %s): a subject of Forms", form, zero)
			}
		}
	}
	if s.OtherSpelling(p+"10_0_0_1."+ccmID("prod", "web", "http", "10.0.0.1", 80), endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}) {
		t.Error("OtherSpelling holds for an IPv4 address, which has one spelling")
	}
}

// TestAddressCheck: a read filtered on an IPv6 address wildcards the address token and
// keeps the subjects that spell the address, in any spelling.
func TestAddressCheck(t *testing.T) {
	s := subjects(t)
	p := sbjs.DefaultPrefix + ".prod.http.web."
	id := ".0123456789abcdef"
	for _, f := range []endpoint.Filter{{}, {Service: "web"}, {Address: "10.0.0.1"}} {
		if s.AddressCheck(f) != nil {
			t.Errorf("AddressCheck(%+v) is a test; want nil: the subject filter is exact", f)
		}
	}
	keep := s.AddressCheck(endpoint.Filter{Address: "2001:DB8:0::1"})
	for subject, want := range map[string]bool{
		p + "2001:db8::1" + id:                 true,
		p + "2001-db8--1" + id:                 true,
		p + "2001:DB8::1" + id:                 true,
		p + "2001:0db8:0:0::1" + id:            true,
		p + "2001:db8::2" + id:                 false,
		p + "10_0_0_1" + id:                    false,
		p + "2001:db8::1%eth0" + id:            false,
		p + "2001:db8::1" + id + ".x":          false,
		"other.prod.http.web.2001:db8::1" + id: false,
	} {
		if got := keep(subject); got != want {
			t.Errorf("AddressCheck(2001:db8::1)(%q) = %v, want %v", subject, got, want)
		}
	}
}

func TestNewSubjectsRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"", "a..b", "a.*.b", "a.>", "a b", ".a", "a."} {
		if _, err := sbjs.NewSubjects(p); err == nil {
			t.Errorf("NewSubjects(%q) accepted", p)
		}
	}
}

func TestFilterSubject(t *testing.T) {
	s := subjects(t)
	p := sbjs.DefaultPrefix
	for _, tc := range []struct {
		f    endpoint.Filter
		want []string
		one  string // Filter, when not want's only subject
	}{
		{endpoint.Filter{}, []string{p + ".*.*.*.*.*"}, ""},
		{endpoint.Filter{Cluster: "*", Service: "*"}, []string{p + ".*.*.*.*.*"}, ""},
		{endpoint.Filter{Cluster: "east"}, []string{p + ".east.*.*.*.*"}, ""},
		{endpoint.Filter{Protocol: "http", Service: "web"}, []string{p + ".*.http.web.*.*"}, ""},
		{endpoint.Filter{Address: "10.0.0.1"}, []string{p + ".*.*.*.10_0_0_1.*"}, ""},
		// An IPv6 address has many spellings: its token is a wildcard (AddressCheck).
		{endpoint.Filter{Service: "web", Address: "2001:DB8:0::1"}, []string{p + ".*.*.web.*.*"}, ""},
		{endpoint.Filter{Address: "::ffff:1.2.3.4"}, []string{p + ".*.*.*.*.*"}, ""},
	} {
		if got := s.Filters(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("Filters(%+v) = %q, want %q", tc.f, got, tc.want)
		}
		if tc.one == "" {
			tc.one = tc.want[0]
		}
		if got := s.Filter(tc.f); got != tc.one {
			t.Errorf("Filter(%+v) = %q, want %q", tc.f, got, tc.one)
		}
	}
	if got, want := s.All(), p+".>"; got != want {
		t.Errorf("All() = %q, want %q", got, want)
	}
}

// FuzzParseSubject: Parse never panics, and whatever it accepts it reads without loss:
// the subject is exactly its parts encoded again with the address as the subject
// spells it (in one of the two spellings), that spelling is an address, and Address
// is that address in canonical form. Canonical holds for exactly the subjects this
// backend derives from the canonical address, For's spelling and that of earlier
// versions; every other accepted subject spells the address otherwise.
func FuzzParseSubject(f *testing.F) {
	s := subjects(f)
	for _, a := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::"} {
		f.Add(s.For(endpoint.Key{Cluster: "c", Service: "web", Protocol: "http", Address: a, Port: 80}))
	}
	f.Add(sbjs.DefaultPrefix + ".c.p.s.--.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.::.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.1_2_3_4.zz")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.2001:DB8::5.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.2001:0db8:0:0::5.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.--FFFF-1_2_3_4.0123456789abcdef")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, subject string) {
		sk, err := s.Parse(subject)
		if err != nil {
			return
		}
		rebuild := func(tok string) string {
			return strings.Join([]string{sbjs.DefaultPrefix, sk.Cluster, sk.Protocol, sk.Service, tok, sk.InstanceID}, ".")
		}
		if rebuild(sbjs.AddressToken(sk.Written)) != subject && rebuild(legacyToken(sk.Written)) != subject {
			t.Fatalf("Parse(%q) = %+v, which re-encodes to %q or %q", subject, sk, rebuild(sbjs.AddressToken(sk.Written)), rebuild(legacyToken(sk.Written)))
		}
		written, err := netip.ParseAddr(sk.Written)
		if err != nil || written.Zone() != "" || written.String() != sk.Address {
			t.Fatalf("Parse(%q) = %+v: the address as written is not %s in another spelling (%v)", subject, sk, sk.Address, err)
		}
		own := rebuild(sbjs.AddressToken(sk.Address)) == subject || rebuild(legacyToken(sk.Address)) == subject
		if sk.Canonical() != own {
			t.Fatalf("Parse(%q) = %+v: Canonical() = %v, but the subject is one this backend writes or wrote: %v", subject, sk, sk.Canonical(), own)
		}
	})
}

// FuzzAddressToken: every canonical IP address encodes to one token without dots,
// spaces or wildcards that keeps its colons and decodes back to it, so does its
// spelling of earlier versions, and so do its other spellings (upper case, every
// group written out); every token that decodes gives a canonical address, which the
// token spells, and re-encodes to itself in one of the two spellings exactly when the
// token spells the address as it is written canonically.
func FuzzAddressToken(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::", "1_2_3_4", "--1", "::1", "fe80--1%x", "::ffff:1_2_3_4",
		"2001:DB8::1", "2001:0db8:0:0::1", "::FFFF:a01:203", "2001-DB8--1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && a.String() == s {
			tok := sbjs.AddressToken(s)
			if strings.ContainsAny(tok, ". \t\r\n*>") || strings.Count(tok, ":") != strings.Count(s, ":") {
				t.Fatalf("AddressToken(%q) = %q holds a character subjects reserve or lost a colon", s, tok)
			}
			for _, tok := range []string{tok, legacyToken(s), strings.ToUpper(tok), sbjs.AddressToken(a.StringExpanded())} {
				back, err := sbjs.ParseAddressToken(tok)
				if err != nil || back != s {
					t.Fatalf("ParseAddressToken(%q) of %q = %q, %v", tok, s, back, err)
				}
			}
		}
		addr, err := sbjs.ParseAddressToken(s)
		if err != nil {
			return
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.String() != addr {
			t.Fatalf("ParseAddressToken(%q) = %q, not a canonical address", s, addr)
		}
		written := strings.NewReplacer("_", ".", "-", ":").Replace(s)
		if w, err := netip.ParseAddr(written); err != nil || w != a {
			t.Fatalf("ParseAddressToken(%q) = %q, but the token spells %q", s, addr, written)
		}
		if own := sbjs.AddressToken(addr) == s || legacyToken(addr) == s; own != (written == addr) {
			t.Fatalf("ParseAddressToken(%q) = %q: re-encodes to the token %v, spelled canonically %v", s, addr, own, written == addr)
		}
	})
}
