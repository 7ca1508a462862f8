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
		{p + "c.p.s.2001-DB8--1." + id, "canonical"},
		{p + "c.p.s.2001:DB8::1." + id, "canonical"},
		{p + "c.p.s.2001-db8-0-0-0-0-0-1." + id, "canonical"},
		{p + "c.p.s.2001:db8--1." + id, "mixes"},
		{p + "c.p.s.fe80--1%eth0." + id, "address token"},
		{p + "c.p.s.10_0_0_1.ABCDEF0123456789", "instance id"},
		{p + "c.p.s.10_0_0_1.123", "instance id"},
	} {
		if _, err := s.Parse(tc.subject); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", tc.subject, err, tc.want)
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
		one  string // Filter: a single subject, the address wildcarded when it has two spellings
	}{
		{endpoint.Filter{}, []string{p + ".*.*.*.*.*"}, ""},
		{endpoint.Filter{Cluster: "*", Service: "*"}, []string{p + ".*.*.*.*.*"}, ""},
		{endpoint.Filter{Cluster: "east"}, []string{p + ".east.*.*.*.*"}, ""},
		{endpoint.Filter{Protocol: "http", Service: "web"}, []string{p + ".*.http.web.*.*"}, ""},
		{endpoint.Filter{Address: "10.0.0.1"}, []string{p + ".*.*.*.10_0_0_1.*"}, ""},
		{endpoint.Filter{Service: "web", Address: "2001:DB8:0::1"}, []string{p + ".*.*.web.2001:db8::1.*", p + ".*.*.web.2001-db8--1.*"}, p + ".*.*.web.*.*"},
		{endpoint.Filter{Address: "::ffff:1.2.3.4"}, []string{p + ".*.*.*.::ffff:1_2_3_4.*", p + ".*.*.*.--ffff-1_2_3_4.*"}, p + ".*.*.*.*.*"},
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

// FuzzParseSubject: Parse never panics, and whatever it accepts is exactly the subject
// its parts encode to in one of the two spellings, so no other subject parses to the
// same entry.
func FuzzParseSubject(f *testing.F) {
	s := subjects(f)
	for _, a := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::"} {
		f.Add(s.For(endpoint.Key{Cluster: "c", Service: "web", Protocol: "http", Address: a, Port: 80}))
	}
	f.Add(sbjs.DefaultPrefix + ".c.p.s.--.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.::.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.1_2_3_4.zz")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, subject string) {
		sk, err := s.Parse(subject)
		if err != nil {
			return
		}
		rebuilt := strings.Join([]string{sbjs.DefaultPrefix, sk.Cluster, sk.Protocol, sk.Service, sbjs.AddressToken(sk.Address), sk.InstanceID}, ".")
		legacy := strings.Join([]string{sbjs.DefaultPrefix, sk.Cluster, sk.Protocol, sk.Service, legacyToken(sk.Address), sk.InstanceID}, ".")
		if rebuilt != subject && legacy != subject {
			t.Fatalf("Parse(%q) = %+v, which re-encodes to %q or %q", subject, sk, rebuilt, legacy)
		}
	})
}

// FuzzAddressToken: every canonical IP address encodes to one token without dots,
// spaces or wildcards that keeps its colons and decodes back to it, so does its
// spelling of earlier versions, and every token that decodes re-encodes to itself
// in one of the two spellings.
func FuzzAddressToken(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::", "1_2_3_4", "--1", "::1", "fe80--1%x", "::ffff:1_2_3_4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && a.String() == s {
			tok := sbjs.AddressToken(s)
			if strings.ContainsAny(tok, ". \t\r\n*>") || strings.Count(tok, ":") != strings.Count(s, ":") {
				t.Fatalf("AddressToken(%q) = %q holds a character subjects reserve or lost a colon", s, tok)
			}
			for _, tok := range []string{tok, legacyToken(s)} {
				back, err := sbjs.ParseAddressToken(tok)
				if err != nil || back != s {
					t.Fatalf("ParseAddressToken(%q) of %q = %q, %v", tok, s, back, err)
				}
			}
		}
		if addr, err := sbjs.ParseAddressToken(s); err == nil {
			if tok := sbjs.AddressToken(addr); tok != s && legacyToken(addr) != s {
				t.Fatalf("ParseAddressToken(%q) = %q, which encodes to %q or %q", s, addr, tok, legacyToken(addr))
			}
		}
	})
}
