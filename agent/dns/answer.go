package dns

import (
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Limits on a UDP answer: 512 bytes without EDNS0 (RFC 1035); with EDNS0 the
// client's size, capped at the 1232 bytes that avoid IP fragmentation (DNS flag day
// 2020). A larger answer is truncated and the client asks again over TCP.
const (
	minUDPSize = 512
	maxUDPSize = 1232
)

// reply answers one query from z. It never returns nil: every query that reaches it
// gets an answer, FORMERR for one that is not a single question.
func (s *Server) reply(z *zone, req *dns.Msg, udp bool, local net.Addr) *dns.Msg {
	resp := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		resp.SetRcode(req, dns.RcodeNotImplemented)
		return resp
	case len(req.Question) != 1:
		resp.SetRcodeFormatError(req)
		return resp
	}
	resp.SetReply(req)
	opt := req.IsEdns0()
	if opt != nil && opt.Version() != 0 {
		resp.SetRcode(req, dns.RcodeBadVers)
		resp.SetEdns0(maxUDPSize, false)
		return resp
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	if !dns.IsSubDomain(z.domain, name) || q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		// The OPT record is echoed on a refusal too (RFC 6891 §7).
		resp.Rcode = dns.RcodeRefused
		s.fit(resp, opt, udp)
		return resp
	}
	resp.Authoritative = true
	n, ok := z.names[name]
	switch {
	case !ok:
		resp.Rcode = dns.RcodeNameError
	case name == z.domain:
		resp.Answer = s.apex(z, q.Qtype)
	case name == z.nameServer():
		resp.Answer = s.records(q.Name, &node{addrs: serverAddr(local)}, q.Qtype)
	default:
		resp.Answer = s.records(q.Name, n, q.Qtype)
		if q.Qtype == dns.TypeSRV || q.Qtype == dns.TypeANY {
			resp.Extra = s.glue(z, n)
		}
	}
	if len(resp.Answer) == 0 {
		// NXDOMAIN or NODATA: the SOA tells resolvers how long to cache the absence.
		resp.Ns = append(resp.Ns, s.soa(z))
	}
	s.fit(resp, opt, udp)
	return resp
}

// records are n's records of type qtype, named as asked (the case of the question
// is kept, as resolvers expect).
func (s *Server) records(qname string, n *node, qtype uint16) []dns.RR {
	var out []dns.RR
	for _, r := range n.addrs {
		switch {
		case r.addr.Is4() && (qtype == dns.TypeA || qtype == dns.TypeANY):
			out = append(out, &dns.A{Hdr: s.hdr(qname, dns.TypeA), A: net.IP(r.addr.AsSlice())})
		case r.addr.Is6() && (qtype == dns.TypeAAAA || qtype == dns.TypeANY):
			out = append(out, &dns.AAAA{Hdr: s.hdr(qname, dns.TypeAAAA), AAAA: net.IP(r.addr.AsSlice())})
		}
	}
	if qtype == dns.TypeSRV || qtype == dns.TypeANY {
		for _, r := range n.srvs {
			out = append(out, &dns.SRV{Hdr: s.hdr(qname, dns.TypeSRV), Priority: uint16(r.priority),
				Weight: uint16(r.weight), Port: uint16(r.port), Target: r.target})
		}
	}
	return out
}

// glue is the addresses of n's SRV targets, so a resolver needs no second query.
func (s *Server) glue(z *zone, n *node) []dns.RR {
	var out []dns.RR
	for _, r := range n.srvs {
		if t := z.names[r.target]; t != nil {
			out = append(out, s.records(r.target, t, dns.TypeANY)...)
		}
	}
	return out
}

func (s *Server) hdr(name string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: s.ttl}
}

// apex is the answer for the domain itself: its SOA and its NS record.
func (s *Server) apex(z *zone, qtype uint16) []dns.RR {
	var out []dns.RR
	if qtype == dns.TypeSOA || qtype == dns.TypeANY {
		out = append(out, s.soa(z))
	}
	if qtype == dns.TypeNS || qtype == dns.TypeANY {
		out = append(out, &dns.NS{Hdr: s.hdr(z.domain, dns.TypeNS), Ns: z.nameServer()})
	}
	return out
}

// serverAddr is the name server's address: the one the question reached it on,
// which is how that client reaches it (none when it listens on every address and
// the transport does not say which).
func serverAddr(local net.Addr) []record {
	var ip net.IP
	switch a := local.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok || addr.IsUnspecified() {
		return nil
	}
	return []record{{addr: addr.Unmap()}}
}

// soa is the zone's start of authority; its minimum TTL, the TTL of negative
// answers, is the record TTL, so a name that appears is found within one TTL.
func (s *Server) soa(z *zone) dns.RR {
	return &dns.SOA{Hdr: s.hdr(z.domain, dns.TypeSOA), Ns: z.nameServer(), Mbox: "hostmaster." + z.domain,
		Serial: z.serial, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: s.ttl}
}

// fit echoes EDNS0 and truncates the answer to what the transport carries: a
// truncated UDP answer has TC set, and the client retries over TCP.
func (s *Server) fit(resp *dns.Msg, opt *dns.OPT, udp bool) {
	size := dns.MaxMsgSize
	if udp {
		size = minUDPSize
		if opt != nil {
			size = min(max(int(opt.UDPSize()), minUDPSize), maxUDPSize)
		}
	}
	if opt != nil {
		resp.SetEdns0(uint16(min(size, maxUDPSize)), false)
	}
	resp.Compress = true
	resp.Truncate(size)
	if resp.Truncated {
		s.m.truncated.Inc()
	}
}
