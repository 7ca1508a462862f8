package jetstream_test

import (
	"net/netip"
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
		{"2001:db8::1", "2001-db8--1"},
		{"::", "--"},
		{"::1", "--1"},
		{"fe80::1:2:3:4", "fe80--1-2-3-4"},
		{"2001:db8:1:2:3:4:5:6", "2001-db8-1-2-3-4-5-6"},
		{"::ffff:10.1.2.3", "--ffff-10_1_2_3"},
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
		{p + "c.p.s.2001-db8-0-0-0-0-0-1." + id, "canonical"},
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
		want string
	}{
		{endpoint.Filter{}, p + ".*.*.*.*.*"},
		{endpoint.Filter{Cluster: "*", Service: "*"}, p + ".*.*.*.*.*"},
		{endpoint.Filter{Cluster: "east"}, p + ".east.*.*.*.*"},
		{endpoint.Filter{Protocol: "http", Service: "web"}, p + ".*.http.web.*.*"},
		{endpoint.Filter{Address: "10.0.0.1"}, p + ".*.*.*.10_0_0_1.*"},
		{endpoint.Filter{Address: "2001:DB8:0::1"}, p + ".*.*.*.2001-db8--1.*"},
	} {
		if got := s.Filter(tc.f); got != tc.want {
			t.Errorf("Filter(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	if got, want := s.All(), p+".>"; got != want {
		t.Errorf("All() = %q, want %q", got, want)
	}
}

// FuzzParseSubject: Parse never panics, and whatever it accepts is exactly the subject
// its parts encode to, so two different subjects never parse to the same entry.
func FuzzParseSubject(f *testing.F) {
	s := subjects(f)
	for _, a := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::"} {
		f.Add(s.For(endpoint.Key{Cluster: "c", Service: "web", Protocol: "http", Address: a, Port: 80}))
	}
	f.Add(sbjs.DefaultPrefix + ".c.p.s.--.0123456789abcdef")
	f.Add(sbjs.DefaultPrefix + ".c.p.s.1_2_3_4.zz")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, subject string) {
		sk, err := s.Parse(subject)
		if err != nil {
			return
		}
		rebuilt := strings.Join([]string{sbjs.DefaultPrefix, sk.Cluster, sk.Protocol, sk.Service, sbjs.AddressToken(sk.Address), sk.InstanceID}, ".")
		if rebuilt != subject {
			t.Fatalf("Parse(%q) = %+v, which re-encodes to %q", subject, sk, rebuilt)
		}
	})
}

// FuzzAddressToken: every canonical IP address encodes to one token without dots,
// spaces or wildcards that decodes back to it, and every token that decodes
// re-encodes to itself.
func FuzzAddressToken(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "2001:db8::1", "::ffff:1.2.3.4", "::", "1_2_3_4", "--1", "fe80--1%x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && a.String() == s {
			tok := sbjs.AddressToken(s)
			if strings.ContainsAny(tok, ". \t\r\n*>") {
				t.Fatalf("AddressToken(%q) = %q holds a character subjects reserve", s, tok)
			}
			back, err := sbjs.ParseAddressToken(tok)
			if err != nil || back != s {
				t.Fatalf("ParseAddressToken(AddressToken(%q)) = %q, %v", s, back, err)
			}
		}
		if addr, err := sbjs.ParseAddressToken(s); err == nil {
			if tok := sbjs.AddressToken(addr); tok != s {
				t.Fatalf("ParseAddressToken(%q) = %q, which encodes to %q", s, addr, tok)
			}
		}
	})
}
