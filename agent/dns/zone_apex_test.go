package dns_test

import (
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestRefusedKeepsEDNS: a REFUSED answer to a query with an OPT record carries one
// too (RFC 6891 §7), for a name outside the zone and for a class the zone lacks.
func TestRefusedKeepsEDNS(t *testing.T) {
	s := startServer(t, dns.Options{}, fleet...)
	for _, q := range []struct {
		name  string
		class uint16
	}{{"example.com.", mdns.ClassINET}, {"web.switchboard.", mdns.ClassCHAOS}} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, mdns.TypeA)
		m.Question[0].Qclass = q.class
		m.SetEdns0(1232, false)
		resp, _, err := (&mdns.Client{Net: "udp", Timeout: wait}).Exchange(m, s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rcode != mdns.RcodeRefused || resp.IsEdns0() == nil {
			t.Errorf("%s class %d with EDNS: %s, OPT %v; want REFUSED with an OPT record", q.name, q.class, mdns.RcodeToString[resp.Rcode], resp.IsEdns0())
		}
	}
}

// TestZoneHasNameServer: the apex has an NS record, and the name server it names (the
// SOA's too) resolves, to the address the question reached the server on.
func TestZoneHasNameServer(t *testing.T) {
	s := startServer(t, dns.Options{}, fleet...)
	resp := exchange(t, s, "udp", "switchboard.", mdns.TypeNS)
	if resp.Rcode != mdns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("switchboard. NS: %s with %v, want one NS record", mdns.RcodeToString[resp.Rcode], resp.Answer)
	}
	ns, ok := resp.Answer[0].(*mdns.NS)
	if !ok || ns.Ns != "ns.switchboard." {
		t.Fatalf("switchboard. NS = %v, want ns.switchboard.", resp.Answer[0])
	}
	soa := exchange(t, s, "udp", "switchboard.", mdns.TypeSOA)
	if len(soa.Answer) != 1 || soa.Answer[0].(*mdns.SOA).Ns != ns.Ns {
		t.Errorf("the SOA names another name server than the NS record: %v", soa.Answer)
	}
	a := exchange(t, s, "udp", ns.Ns, mdns.TypeA)
	if a.Rcode != mdns.RcodeSuccess || len(a.Answer) != 1 || a.Answer[0].(*mdns.A).A.String() != "127.0.0.1" {
		t.Errorf("%s A: %s with %v, want 127.0.0.1, where the server was reached", ns.Ns, mdns.RcodeToString[a.Rcode], a.Answer)
	}
	if aaaa := exchange(t, s, "udp", ns.Ns, mdns.TypeAAAA); aaaa.Rcode != mdns.RcodeSuccess || len(aaaa.Answer) != 0 {
		t.Errorf("%s AAAA: %s with %v, want NODATA", ns.Ns, mdns.RcodeToString[aaaa.Rcode], aaaa.Answer)
	}
}

// TestLongNamesAreLeftOut: a service or cluster name longer than a DNS label (63
// bytes) makes no name in the zone, and is counted; the rest of the endpoint's
// names and every other endpoint are served.
func TestLongNamesAreLeftOut(t *testing.T) {
	long := "s" + strings.Repeat("x", 63) // 64 bytes: a valid registry name, too long for a label
	s := startServer(t, dns.Options{},
		ep("prod", long, "http", "10.0.0.7", 80, 1, 1),
		ep(long, "web", "http", "10.0.0.8", 80, 1, 1),
		ep("prod", "api", "http", "10.0.0.9", 80, 1, 1))
	if err := endpoint.ValidateName("service", long); err != nil {
		t.Fatalf("the registry refuses the name, so this test shows nothing: %v", err)
	}
	if resp := exchange(t, s, "udp", "api.prod.switchboard.", mdns.TypeA); len(resp.Answer) != 1 {
		t.Errorf("api.prod: %v, want its address", resp.Answer)
	}
	// The endpoint in a long cluster is still web's, under the service-only name.
	if resp := exchange(t, s, "udp", "web.switchboard.", mdns.TypeA); len(resp.Answer) != 1 {
		t.Errorf("web.switchboard.: %v, want 10.0.0.8", resp.Answer)
	}
	if got := metric(t, s, "switchboard_agent_dns_endpoints_left_out", ""); got != 2 {
		t.Errorf("endpoints left out: %v, want 2 (the long service, the long cluster)", got)
	}
}
