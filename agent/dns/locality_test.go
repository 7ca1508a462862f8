package dns_test

import (
	"fmt"
	"slices"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func placedEp(addr string, priority int, region, zone string, h endpoint.Health) endpoint.Endpoint {
	e := ep("prod", "api", "http", addr, 80, priority, 10)
	e.Region, e.Zone, e.Health = region, zone, h
	return e
}

// answers renders a response's answer section, in order: "A 10.0.0.1", "SRV 1 80
// 0a000001.addr.switchboard.".
func answers(resp *mdns.Msg) []string {
	var out []string
	for _, rr := range resp.Answer {
		switch r := rr.(type) {
		case *mdns.A:
			out = append(out, "A "+r.A.String())
		case *mdns.AAAA:
			out = append(out, "AAAA "+r.AAAA.String())
		case *mdns.SRV:
			out = append(out, fmt.Sprintf("SRV %d %d %s", r.Priority, r.Port, r.Target))
		}
	}
	return out
}

// TestDrainingAndUnhealthyAreLeftOut: only healthy endpoints are answered, in A,
// AAAA, SRV and the SRV targets' names and glue; a service with none left answers
// NODATA (it is registered), and an address only a draining endpoint has is no
// name at all.
func TestDrainingAndUnhealthyAreLeftOut(t *testing.T) {
	drained := ep("prod", "old", "http", "10.0.0.9", 80, 1, 0)
	drained.Health = endpoint.Draining
	s := startServer(t, dns.Options{},
		placedEp("10.0.0.1", 1, "", "", endpoint.Healthy),
		placedEp("10.0.0.2", 1, "", "", endpoint.Draining),
		placedEp("10.0.0.3", 1, "", "", endpoint.Unhealthy),
		placedEp("fd00::1", 1, "", "", endpoint.Draining),
		placedEp("fd00::2", 2, "", "", endpoint.Healthy),
		placedEp("fd00::3", 2, "", "", endpoint.Health(9)), // a state this agent does not know
		drained,
	)
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string
	}{
		{"api.switchboard.", mdns.TypeA, mdns.RcodeSuccess, []string{"A 10.0.0.1"}},
		{"api.prod.switchboard.", mdns.TypeAAAA, mdns.RcodeSuccess, []string{"AAAA fd00::2"}},
		{"api.switchboard.", mdns.TypeANY, mdns.RcodeSuccess, []string{"A 10.0.0.1", "AAAA fd00::2"}},
		{"_api._http.switchboard.", mdns.TypeSRV, mdns.RcodeSuccess, []string{
			"SRV 1 80 0a000001.addr.switchboard.", "SRV 2 80 fd000000000000000000000000000002.addr.switchboard."}},
		{"_api._http.prod.switchboard.", mdns.TypeSRV, mdns.RcodeSuccess, []string{
			"SRV 1 80 0a000001.addr.switchboard.", "SRV 2 80 fd000000000000000000000000000002.addr.switchboard."}},
		{"old.switchboard.", mdns.TypeA, mdns.RcodeSuccess, nil},          // NODATA
		{"_old._http.switchboard.", mdns.TypeSRV, mdns.RcodeSuccess, nil}, // NODATA
		{"0a000002.addr.switchboard.", mdns.TypeA, mdns.RcodeNameError, nil},
		{"0a000009.addr.switchboard.", mdns.TypeA, mdns.RcodeNameError, nil},
	} {
		resp := exchange(t, s, "udp", c.name, c.qtype)
		if got := answers(resp); resp.Rcode != c.rcode || !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %s %q, want %s %q", c.name, mdns.TypeToString[c.qtype],
				mdns.RcodeToString[resp.Rcode], got, mdns.RcodeToString[c.rcode], c.want)
		}
		if c.qtype == mdns.TypeSRV && len(resp.Extra) != len(c.want) {
			t.Errorf("%s SRV: %d glue records, want one per healthy target: %v", c.name, len(resp.Extra), resp.Extra)
		}
	}
}

// zoned has endpoints at two priorities in the agent's zone, another zone of its
// region, a zone of the same name in another region, and no place.
var zoned = []endpoint.Endpoint{
	placedEp("10.0.0.1", 1, "eu", "eu-a", endpoint.Healthy),
	placedEp("10.0.0.2", 1, "eu", "eu-b", endpoint.Healthy),
	placedEp("10.0.0.3", 1, "us", "eu-a", endpoint.Healthy),
	placedEp("10.0.0.4", 1, "", "", endpoint.Healthy),
	placedEp("10.0.0.5", 2, "eu", "eu-a", endpoint.Healthy),
	placedEp("10.0.0.6", 2, "us", "us-a", endpoint.Healthy),
}

// TestSRVPrefersTheAgentsZone: with the agent's zone set, SRV priorities put its
// zone first, then its region, then the rest, within each endpoint priority, and A
// records come in that order; without it, the endpoint priorities as they are.
func TestSRVPrefersTheAgentsZone(t *testing.T) {
	for _, c := range []struct {
		opts    dns.Options
		srv, as []string
	}{
		{dns.Options{}, []string{
			"SRV 1 80 0a000001.addr.switchboard.", "SRV 1 80 0a000002.addr.switchboard.",
			"SRV 1 80 0a000003.addr.switchboard.", "SRV 1 80 0a000004.addr.switchboard.",
			"SRV 2 80 0a000005.addr.switchboard.", "SRV 2 80 0a000006.addr.switchboard.",
		}, []string{"A 10.0.0.1", "A 10.0.0.2", "A 10.0.0.3", "A 10.0.0.4", "A 10.0.0.5", "A 10.0.0.6"}},
		{dns.Options{Region: "eu", Zone: "eu-a"}, []string{
			"SRV 1 80 0a000001.addr.switchboard.", // priority 1, this zone
			"SRV 2 80 0a000002.addr.switchboard.", // priority 1, this region
			"SRV 3 80 0a000003.addr.switchboard.", // priority 1, elsewhere
			"SRV 3 80 0a000004.addr.switchboard.",
			"SRV 4 80 0a000005.addr.switchboard.", // priority 2, this zone
			"SRV 6 80 0a000006.addr.switchboard.", // priority 2, elsewhere
		}, []string{"A 10.0.0.1", "A 10.0.0.2", "A 10.0.0.3", "A 10.0.0.4", "A 10.0.0.5", "A 10.0.0.6"}},
		{dns.Options{Region: "us"}, []string{
			"SRV 2 80 0a000003.addr.switchboard.", // a region only: no endpoint is in the zone
			"SRV 3 80 0a000001.addr.switchboard.",
			"SRV 3 80 0a000002.addr.switchboard.",
			"SRV 3 80 0a000004.addr.switchboard.",
			"SRV 5 80 0a000006.addr.switchboard.",
			"SRV 6 80 0a000005.addr.switchboard.",
		}, []string{"A 10.0.0.3", "A 10.0.0.1", "A 10.0.0.2", "A 10.0.0.4", "A 10.0.0.6", "A 10.0.0.5"}},
	} {
		s := startServer(t, c.opts, zoned...)
		if got := answers(exchange(t, s, "tcp", "_api._http.switchboard.", mdns.TypeSRV)); !slices.Equal(got, c.srv) {
			t.Errorf("region %q zone %q: SRV\n got %q\nwant %q", c.opts.Region, c.opts.Zone, got, c.srv)
		}
		if got := answers(exchange(t, s, "tcp", "api.switchboard.", mdns.TypeA)); !slices.Equal(got, c.as) {
			t.Errorf("region %q zone %q: A\n got %q\nwant %q", c.opts.Region, c.opts.Zone, got, c.as)
		}
	}
}

// TestSRVPreferenceThroughGosResolver: Go's resolver, which follows RFC 2782, puts
// the record of the agent's zone first.
func TestSRVPreferenceThroughGosResolver(t *testing.T) {
	r := resolver(startServer(t, dns.Options{Region: "eu", Zone: "eu-b"}, zoned...))
	_, srvs, err := r.LookupSRV(lookupCtx(t), "api", "http", "switchboard.")
	if err != nil {
		t.Fatal(err)
	}
	if len(srvs) != len(zoned) || srvs[0].Target != "0a000002.addr.switchboard." {
		t.Errorf("first SRV target %s of %d, want 0a000002.addr.switchboard. (10.0.0.2, in eu-b) of %d", srvs[0].Target, len(srvs), len(zoned))
	}
}

func TestBadLocality(t *testing.T) {
	for _, o := range []dns.Options{{Region: "eu west"}, {Zone: "a|b"}} {
		pc, ln, err := dns.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, err = dns.New(pc, ln, o)
		pc.Close()
		ln.Close()
		if err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
