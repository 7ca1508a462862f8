package jetstream

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// holdsByParsing is what holds means, written with the exported parser: subject is
// prefix.cluster.protocol.service.<token>.<id>, the names k's, the token any spelling
// of k's address, and one id token without a dot.
func holdsByParsing(s Subjects, subject string, k endpoint.Key) bool {
	rest, ok := strings.CutPrefix(subject, s.prefix+"."+k.Cluster+"."+k.Protocol+"."+k.Service+".")
	if !ok {
		return false
	}
	tok, id, ok := strings.Cut(rest, ".")
	if !ok || id == "" || strings.Contains(id, ".") {
		return false
	}
	addr, err := ParseAddressToken(tok)
	return err == nil && addr == k.Address
}

// TestHoldsOtherSpellings: a payload on a subject that spells its IPv6 address
// otherwise (another writer keeps it as written) is that subject's entry; one on the
// subject of another address is not. The subjects this backend writes are checked
// without allocating.
func TestHoldsOtherSpellings(t *testing.T) {
	s, _ := NewSubjects("sb")
	k := endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "2001:db8::5", Port: 80}
	id := ".0123456789abcdef"
	for subject, want := range map[string]bool{
		s.For(k):                                   true,
		"sb.prod.http.web.2001-db8--5" + id:        true,
		"sb.prod.http.web.2001:DB8::5" + id:        true,
		"sb.prod.http.web.2001:0db8:0:0::5" + id:   true,
		"sb.prod.http.web.2001-DB8--5" + id:        true,
		"sb.prod.http.web.2001:db8::6" + id:        false,
		"sb.prod.http.web.2001:DB8::5":             false,
		"sb.prod.http.web.2001:DB8::5" + id + ".x": false,
		"sb.prod.http.api.2001:DB8::5" + id:        false,
		"sb.prod.http.web.2001:DB8::5%x" + id:      false,
		"sb.prod.http.web.2001:DB8--5" + id:        false,
	} {
		if got := s.holds(subject, k); got != want || got != holdsByParsing(s, subject, k) {
			t.Errorf("holds(%q, %s) = %v, want %v", subject, k, got, want)
		}
	}
	for _, k := range []endpoint.Key{k, {Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}} {
		for _, subject := range s.Forms(k) {
			if n := testing.AllocsPerRun(100, func() { s.holds(subject, k) }); n != 0 {
				t.Errorf("holds(%q) allocates %v times", subject, n)
			}
		}
	}
}

// FuzzHolds: holds, with its string comparisons for the spellings this backend
// writes, says what parsing the subject says, for every valid key.
func FuzzHolds(f *testing.F) {
	s, _ := NewSubjects("sb")
	for _, a := range []string{"10.0.0.1", "2001:db8::5", "::ffff:1.2.3.4"} {
		k := endpoint.Key{Cluster: "c", Service: "s", Protocol: "p", Address: a, Port: 1}
		for _, subject := range s.Forms(k) {
			f.Add(subject, a)
		}
	}
	f.Add("sb.c.p.s.2001:DB8::5.0123456789abcdef", "2001:db8::5")
	f.Add("sb.c.p.s.2001-DB8-0--5.x", "2001:db8::5")
	f.Add("sb.c.p.s.::FFFF:1_2_3_4.x", "::ffff:1.2.3.4")
	f.Add("sb.c.p.s.10_0_0_1.x.y", "10.0.0.1")
	f.Fuzz(func(t *testing.T, subject, addr string) {
		k := endpoint.Key{Cluster: "c", Service: "s", Protocol: "p", Address: addr, Port: 1}
		if k.Validate() != nil {
			return // readers check only keys that validate
		}
		if got, want := s.holds(subject, k), holdsByParsing(s, subject, k); got != want {
			t.Fatalf("holds(%q, %s) = %v, parsing says %v", subject, k, got, want)
		}
	})
}

// TestDecodeOtherSpellings: a payload whose IPv6 address another writer kept as it was
// written reads with the address in canonical form, by either decoder; an address
// that is no address, or carries a zone, is still refused.
func TestDecodeOtherSpellings(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"2001:DB8::5", "2001:db8::5"},
		{"2001:0db8:0:0::5", "2001:db8::5"},
		{"::FFFF:10.1.2.3", "::ffff:10.1.2.3"},
		{"::ffff:a01:203", "::ffff:10.1.2.3"},
		{"2001:db8::5%eth0", ""},
		{"010.0.0.1", ""},
		{"2001:DB8::zz", ""},
	} {
		for _, extra := range []string{"", `,"future":1`} { // the fast path, then encoding/json
			data := []byte(`{"cluster":"c","service":"s","protocol":"p","address":"` + tc.addr + `","port":1,"priority":1` + extra + `}`)
			e, err := decodeJSON(data, nil)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("decodeJSON(%s) = %+v, want an error", data, e)
			case tc.want != "" && (err != nil || e.Address != tc.want):
				t.Errorf("decodeJSON(%s) = %+v, %v; want address %s", data, e, err, tc.want)
			}
		}
	}
	// Another broken rule is reported as such, whatever the address.
	if _, err := decodeJSON([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"2001:DB8::5","port":1,"priority":0}`), nil); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Errorf("decodeJSON of priority 0 with a non-canonical address: %v, want the priority named", err)
	}
}
