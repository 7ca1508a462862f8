package dns

import (
	"fmt"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func fuzzServer() (*Server, *zone) {
	s := &Server{opts: Options{Domain: DefaultDomain}, ttl: 5, m: newMetrics()}
	var eps []endpoint.Endpoint
	for i, a := range []string{"10.0.0.1", "10.0.0.2", "fd00::1", "192.0.2.1", "10.0.0.5", "10.0.0.6"} {
		eps = append(eps, endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: a, Port: 80 + i, Priority: 1 + i%4, Weight: i,
			Region: []string{"eu", "eu", "us", ""}[i%4], Zone: []string{"eu-a", "eu-b", "us-a", ""}[i%4], Health: endpoint.Health(i % 3)})
	}
	// A service with no endpoint that takes work: its names exist, with no records.
	eps = append(eps, endpoint.Endpoint{Cluster: "prod", Service: "gone", Protocol: "http", Address: "10.0.0.9", Port: 80, Priority: 1, Health: endpoint.Draining})
	for i := range 60 {
		eps = append(eps, endpoint.Endpoint{Cluster: "prod", Service: "big", Protocol: "tcp", Address: fmt.Sprintf("10.1.0.%d", i+1), Port: 1000 + i, Priority: 1})
	}
	endpoint.Sort(eps)
	return s, newZone(DefaultDomain, 1, eps, place{region: "eu", zone: "eu-a"})
}

func query(name string, qtype uint16, edns uint16) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns > 0 {
		m.SetEdns0(edns, false)
	}
	b, _ := m.Pack()
	return b
}

// FuzzQuery feeds arbitrary bytes down the query path: whatever parses gets an
// answer with the query's id that packs within the transport's size, and a message
// that is not one question gets FORMERR. What does not parse never reaches the
// handler: miekg/dns answers it FORMERR (TestMalformedQueriesGetFORMERR).
func FuzzQuery(f *testing.F) {
	for _, seed := range [][]byte{
		query("web.switchboard.", dns.TypeA, 0),
		query("web.prod.switchboard.", dns.TypeAAAA, 0),
		query("_web._http.switchboard.", dns.TypeSRV, 1232),
		query("_gone._http.prod.switchboard.", dns.TypeSRV, 0),
		query("0a000009.addr.switchboard.", dns.TypeA, 0),
		query("big.switchboard.", dns.TypeA, 0),
		query("_big._tcp.switchboard.", dns.TypeANY, 4096),
		query("switchboard.", dns.TypeSOA, 0),
		query("nope.switchboard.", dns.TypeA, 0),
		query("example.com.", dns.TypeA, 0),
		ednsVersion(1),
		{0x12, 0x34, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0},
		{},
	} {
		f.Add(seed)
	}
	s, z := fuzzServer()
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		for _, udp := range []bool{true, false} {
			resp := s.reply(z, req, udp, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53})
			if resp.Id != req.Id || !resp.Response {
				t.Fatalf("answer id %d response %v, want id %d response true", resp.Id, resp.Response, req.Id)
			}
			if req.Opcode == dns.OpcodeQuery && len(req.Question) != 1 && resp.Rcode != dns.RcodeFormatError {
				t.Fatalf("%d questions answered %s, want FORMERR", len(req.Question), dns.RcodeToString[resp.Rcode])
			}
			out, err := resp.Pack()
			if err != nil {
				t.Fatalf("answer does not pack: %v\n%v", err, resp)
			}
			if limit := udpLimit(req); udp && len(out) > limit {
				t.Fatalf("UDP answer of %d bytes, limit %d", len(out), limit)
			}
			if err := new(dns.Msg).Unpack(out); err != nil {
				t.Fatalf("answer does not parse back: %v", err)
			}
		}
	})
}

func udpLimit(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return min(max(int(opt.UDPSize()), minUDPSize), maxUDPSize)
	}
	return minUDPSize
}

// ednsVersion is a query with an EDNS0 version this server does not speak.
func ednsVersion(v uint8) []byte {
	m := new(dns.Msg)
	m.SetQuestion("web.switchboard.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(v)
	b, _ := m.Pack()
	return b
}
