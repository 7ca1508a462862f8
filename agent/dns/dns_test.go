package dns_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

var fleet = []endpoint.Endpoint{
	ep("prod", "web", "http", "10.0.0.1", 80, 1, 10),
	ep("prod", "web", "grpc", "10.0.0.1", 9090, 1, 10),
	ep("prod", "web", "http", "10.0.0.2", 80, 2, 5),
	ep("stage", "web", "http", "fd00::3", 8080, 1, 0),
	ep("stage", "db", "tcp", "10.0.1.1", 5432, 1, 0),
	ep("stage", "noport", "tcp", "10.0.1.2", 0, 1, 0),
}

func addrs(t *testing.T, r *net.Resolver, network, host string) []string {
	t.Helper()
	ips, err := r.LookupNetIP(lookupCtx(t), network, host)
	if err != nil {
		t.Fatalf("lookup %s %s: %v", network, host, err)
	}
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}

func TestAddressRecords(t *testing.T) {
	r := resolver(startServer(t, dns.Options{}, fleet...))
	for _, c := range []struct {
		network, host string
		want          []string
	}{
		{"ip4", "web.prod.switchboard.", []string{"10.0.0.1", "10.0.0.2"}},
		{"ip4", "web.switchboard.", []string{"10.0.0.1", "10.0.0.2"}},
		{"ip6", "web.switchboard.", []string{"fd00::3"}},
		{"ip", "web.stage.switchboard.", []string{"fd00::3"}},
		{"ip4", "WEB.Prod.SwitchBoard.", []string{"10.0.0.1", "10.0.0.2"}}, // DNS names ignore case
		{"ip4", "noport.switchboard.", []string{"10.0.1.2"}},
		{"ip4", "0a000101.addr.switchboard.", []string{"10.0.1.1"}}, // an SRV target
	} {
		if got := addrs(t, r, c.network, c.host); !slices.Equal(got, c.want) {
			t.Errorf("%s %s = %v, want %v", c.network, c.host, got, c.want)
		}
	}
}

func TestSRVRecords(t *testing.T) {
	r := resolver(startServer(t, dns.Options{Domain: "sb.example"}, fleet...))
	_, srvs, err := r.LookupSRV(lookupCtx(t), "web", "http", "sb.example.")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range srvs {
		got = append(got, fmt.Sprintf("%d %d %d %s", s.Priority, s.Weight, s.Port, s.Target))
	}
	// Every cluster, in priority order; the target names resolve to the address.
	want := []string{
		"1 10 80 0a000001.addr.sb.example.",
		"1 0 8080 fd000000000000000000000000000003.addr.sb.example.",
		"2 5 80 0a000002.addr.sb.example.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("SRV _web._http.sb.example.\n got %q\nwant %q", got, want)
	}
	if got := addrs(t, r, "ip", srvs[0].Target); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("target %s resolves to %v", srvs[0].Target, got)
	}
	_, srvs, err = r.LookupSRV(lookupCtx(t), "web", "grpc", "prod.sb.example.")
	if err != nil || len(srvs) != 1 || srvs[0].Port != 9090 {
		t.Errorf("SRV _web._grpc.prod.sb.example. = %v, %v; want one record, port 9090", srvs, err)
	}
}

// TestSRVOrderingHonoursPriorityAndWeight: a resolver puts lower priority values
// first and, within a priority, picks heavier records first more often.
func TestSRVOrderingHonoursPriorityAndWeight(t *testing.T) {
	r := resolver(startServer(t, dns.Options{},
		ep("prod", "api", "http", "10.0.0.1", 80, 1, 1),
		ep("prod", "api", "http", "10.0.0.2", 80, 1, 99),
		ep("prod", "api", "http", "10.0.0.3", 80, 2, 1000),
		ep("prod", "api", "http", "10.0.0.4", 80, 3, 0),
	))
	heavyFirst := 0
	const rounds = 200
	for range rounds {
		_, srvs, err := r.LookupSRV(lookupCtx(t), "api", "http", "switchboard.")
		if err != nil {
			t.Fatal(err)
		}
		var prios []uint16
		for _, s := range srvs {
			prios = append(prios, s.Priority)
		}
		if !slices.Equal(prios, []uint16{1, 1, 2, 3}) {
			t.Fatalf("priorities in order %v, want [1 1 2 3]", prios)
		}
		if srvs[0].Weight == 99 {
			heavyFirst++
		}
	}
	// Weight 99 against 1 comes first 99% of the time; 75% leaves room for chance.
	if heavyFirst < rounds*3/4 {
		t.Errorf("the weight-99 record came first %d times in %d, want most", heavyFirst, rounds)
	}
}

func exchange(t *testing.T, s *dns.Server, network, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	c := &mdns.Client{Net: network, Timeout: wait}
	resp, _, err := c.Exchange(m, s.Addr())
	if err != nil {
		t.Fatalf("%s %s: %v", name, mdns.TypeToString[qtype], err)
	}
	if resp.Id != m.Id {
		t.Fatalf("answer id %d, want %d", resp.Id, m.Id)
	}
	return resp
}

func TestNegativeAnswers(t *testing.T) {
	s := startServer(t, dns.Options{TTL: 3 * time.Second}, fleet...)
	cases := []struct {
		name    string
		qtype   uint16
		rcode   int
		answers int
	}{
		{"web.prod.switchboard.", mdns.TypeA, mdns.RcodeSuccess, 2},
		{"web.prod.switchboard.", mdns.TypeAAAA, mdns.RcodeSuccess, 0}, // NODATA: the name has A records only
		{"web.prod.switchboard.", mdns.TypeTXT, mdns.RcodeSuccess, 0},
		{"_web._http.switchboard.", mdns.TypeA, mdns.RcodeSuccess, 0},
		{"prod.switchboard.", mdns.TypeA, mdns.RcodeSuccess, 0},    // a cluster: an empty non-terminal
		{"_http.switchboard.", mdns.TypeSRV, mdns.RcodeSuccess, 0}, // so is a protocol
		{"switchboard.", mdns.TypeA, mdns.RcodeSuccess, 0},
		{"switchboard.", mdns.TypeSOA, mdns.RcodeSuccess, 1},
		{"nope.switchboard.", mdns.TypeA, mdns.RcodeNameError, 0},
		{"web.nope.switchboard.", mdns.TypeA, mdns.RcodeNameError, 0},
		{"x.web.prod.switchboard.", mdns.TypeA, mdns.RcodeNameError, 0},
		{"_web._tcp.switchboard.", mdns.TypeSRV, mdns.RcodeNameError, 0},
		{"_noport._tcp.switchboard.", mdns.TypeSRV, mdns.RcodeNameError, 0}, // no port, no SRV
		{"example.com.", mdns.TypeA, mdns.RcodeRefused, 0},                  // no upstream configured
	}
	for _, c := range cases {
		resp := exchange(t, s, "udp", c.name, c.qtype)
		qt := mdns.TypeToString[c.qtype]
		if resp.Rcode != c.rcode || len(resp.Answer) != c.answers {
			t.Errorf("%s %s: %s with %d answers, want %s with %d", c.name, qt,
				mdns.RcodeToString[resp.Rcode], len(resp.Answer), mdns.RcodeToString[c.rcode], c.answers)
			continue
		}
		if c.rcode == mdns.RcodeRefused {
			continue
		}
		if !resp.Authoritative {
			t.Errorf("%s %s: not authoritative", c.name, qt)
		}
		for _, rr := range resp.Answer {
			if rr.Header().Ttl != 3 {
				t.Errorf("%s %s: TTL %d, want 3", c.name, qt, rr.Header().Ttl)
			}
		}
		if c.answers == 0 {
			soa, ok := firstSOA(resp.Ns)
			if !ok || soa.Minttl != 3 {
				t.Errorf("%s %s: negative answer without the SOA that bounds its caching: %v", c.name, qt, resp.Ns)
			}
		}
	}
	nx := 0
	for _, c := range cases {
		if c.rcode == mdns.RcodeNameError {
			nx++
		}
	}
	if got := metric(t, s, "switchboard_agent_dns_queries_total", "NXDOMAIN"); got != float64(nx) {
		t.Errorf("queries counted NXDOMAIN: %v, want %d", got, nx)
	}
}

// metric reads a series of the server's through a registry, as /metrics would; rcode
// selects the series with that label, "" the unlabelled one.
func metric(t *testing.T, s *dns.Server, name, rcode string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := rcode == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == "rcode" && l.GetValue() == rcode
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func firstSOA(rrs []mdns.RR) (*mdns.SOA, bool) {
	for _, rr := range rrs {
		if soa, ok := rr.(*mdns.SOA); ok {
			return soa, true
		}
	}
	return nil, false
}

func TestLargeAnswersAreTruncatedOverUDPAndWholeOverTCP(t *testing.T) {
	var eps []endpoint.Endpoint
	for i := range 150 {
		eps = append(eps, ep("prod", "big", "http", fmt.Sprintf("10.1.%d.%d", i/200, i%200+1), 80, 1, 0))
	}
	s := startServer(t, dns.Options{}, eps...)
	udp := exchange(t, s, "udp", "big.switchboard.", mdns.TypeA)
	if !udp.Truncated || len(udp.Answer) >= 150 {
		t.Errorf("UDP answer: TC %v with %d records, want TC set and fewer than 150", udp.Truncated, len(udp.Answer))
	}
	udp.Compress = true // as it was sent
	if n := udp.Len(); n > 512 {
		t.Errorf("UDP answer without EDNS0 is %d bytes, want at most 512", n)
	}
	if tcp := exchange(t, s, "tcp", "big.switchboard.", mdns.TypeA); tcp.Truncated || len(tcp.Answer) != 150 {
		t.Errorf("TCP answer: TC %v with %d records, want all 150", tcp.Truncated, len(tcp.Answer))
	}
	// Go's resolver retries a truncated answer over TCP and sees them all.
	if got := addrs(t, resolver(s), "ip4", "big.switchboard."); len(got) != 150 {
		t.Errorf("net.Resolver found %d addresses, want 150", len(got))
	}
	if n := metric(t, s, "switchboard_agent_dns_truncated_total", ""); n < 1 {
		t.Errorf("truncated answers counted: %v, want at least 1", n)
	}
}

// TestChangeVisibleWithinOneTTL runs the agent's pipeline: a registration and a
// removal in the registry reach the resolver within one TTL.
func TestChangeVisibleWithinOneTTL(t *testing.T) {
	const ttl = 2 * time.Second
	reg := memory.New()
	t.Cleanup(func() { reg.Close() })
	s := newServer(t, dns.Options{TTL: ttl})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{Registry: reg, Servers: []agent.Server{s},
			Discovery: agent.DiscoveryOptions{Debounce: 20 * time.Millisecond}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	})
	r := resolver(s)
	a, b := ep("prod", "web", "http", "10.0.0.1", 80, 1, 0), ep("prod", "web", "http", "10.0.0.2", 80, 1, 0)
	apply(t, reg, registry.Register(a))
	waitAddrs(t, r, "web.switchboard.", time.Now().Add(wait), "10.0.0.1") // the agent starting up

	start := time.Now()
	apply(t, reg, registry.Register(b))
	waitAddrs(t, r, "web.switchboard.", start.Add(ttl), "10.0.0.1", "10.0.0.2")
	start = time.Now()
	apply(t, reg, registry.Unregister(a))
	waitAddrs(t, r, "web.switchboard.", start.Add(ttl), "10.0.0.2")
	start = time.Now()
	apply(t, reg, registry.Unregister(b))
	waitAddrs(t, r, "web.switchboard.", start.Add(ttl))
}

func apply(t *testing.T, reg registry.Registry, ops ...registry.Op) {
	t.Helper()
	if err := reg.Apply(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

// waitAddrs asks until host resolves to exactly want (nothing: not found).
func waitAddrs(t *testing.T, r *net.Resolver, host string, deadline time.Time, want ...string) {
	t.Helper()
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ips, err := r.LookupNetIP(ctx, "ip4", host)
		cancel()
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (%v), want %v", host, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMalformedQueriesGetFORMERR sends broken messages over a real socket: each gets
// FORMERR (NOTIMP for an opcode other than QUERY) with its id, and the server
// answers the next good query.
func TestMalformedQueriesGetFORMERR(t *testing.T) {
	s := startServer(t, dns.Options{}, fleet...)
	good := new(mdns.Msg)
	good.SetQuestion("web.switchboard.", mdns.TypeA)
	good.Id = 0x1234
	packed, err := good.Pack()
	if err != nil {
		t.Fatal(err)
	}
	twoQuestions := good.Copy()
	twoQuestions.Question = append(twoQuestions.Question, twoQuestions.Question[0])
	two, _ := twoQuestions.Pack()
	update := good.Copy()
	update.Opcode = mdns.OpcodeUpdate
	upd, _ := update.Pack()
	notify := good.Copy()
	notify.Opcode = mdns.OpcodeNotify
	ntf, _ := notify.Pack()
	badLabel := slices.Clone(packed)
	badLabel[12] = 63 // a label length running past the message
	for _, c := range []struct {
		name  string
		msg   []byte
		rcode int
	}{
		{"question cut short", packed[:len(packed)-3], mdns.RcodeFormatError},
		{"label past the end", badLabel, mdns.RcodeFormatError},
		{"header only, one question announced", packed[:12], mdns.RcodeFormatError},
		{"two questions", two, mdns.RcodeFormatError},
		{"UPDATE", upd, mdns.RcodeNotImplemented},
		{"NOTIFY", ntf, mdns.RcodeNotImplemented},
	} {
		resp := rawUDP(t, s.Addr(), c.msg)
		if resp.Id != 0x1234 || resp.Rcode != c.rcode {
			t.Errorf("%s: answer id %#x %s, want id 0x1234 %s", c.name, resp.Id, mdns.RcodeToString[resp.Rcode], mdns.RcodeToString[c.rcode])
		}
	}
	if resp := exchange(t, s, "udp", "web.switchboard.", mdns.TypeA); resp.Rcode != mdns.RcodeSuccess || len(resp.Answer) != 2 {
		t.Errorf("after the malformed queries: %v", resp)
	}
}

func rawUDP(t *testing.T, addr string, msg []byte) *mdns.Msg {
	t.Helper()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp := new(mdns.Msg)
	if err := resp.Unpack(buf[:n]); err != nil {
		t.Fatalf("answer does not parse: %v", err)
	}
	return resp
}

func TestBeforeTheRegistryWasReadEverythingIsSERVFAIL(t *testing.T) {
	s := startServer(t, dns.Options{})
	if resp := exchange(t, s, "udp", "web.switchboard.", mdns.TypeA); resp.Rcode != mdns.RcodeServerFailure {
		t.Errorf("before the first update: %s, want SERVFAIL (not a cacheable NXDOMAIN)", mdns.RcodeToString[resp.Rcode])
	}
	update(t, s)
	if resp := exchange(t, s, "udp", "web.switchboard.", mdns.TypeA); resp.Rcode != mdns.RcodeNameError {
		t.Errorf("after an empty update: %s, want NXDOMAIN", mdns.RcodeToString[resp.Rcode])
	}
}

func TestForwardsOutsideTheDomainWhenConfigured(t *testing.T) {
	upstream := startUpstream(t, "example.test.", netip.MustParseAddr("192.0.2.7"))
	s := startServer(t, dns.Options{Upstream: upstream}, fleet...)
	r := resolver(s)
	if got := addrs(t, r, "ip4", "www.example.test."); !slices.Equal(got, []string{"192.0.2.7"}) {
		t.Errorf("forwarded answer %v, want [192.0.2.7]", got)
	}
	if got := addrs(t, r, "ip4", "web.prod.switchboard."); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("own domain with an upstream: %v", got)
	}
}

// startUpstream runs a resolver that answers every name under zone with addr.
func startUpstream(t *testing.T, zone string, addr netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) {
		resp := new(mdns.Msg)
		resp.SetReply(req)
		if q := req.Question[0]; mdns.IsSubDomain(zone, q.Name) && q.Qtype == mdns.TypeA {
			resp.Answer = append(resp.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: addr.AsSlice()})
		}
		w.WriteMsg(resp)
	})
	started := make(chan struct{})
	srv := &mdns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { defer close(done); srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return pc.LocalAddr().String()
}

func TestBadOptions(t *testing.T) {
	for _, o := range []dns.Options{
		{Domain: "."},
		{Domain: "bad..name"},
		{TTL: time.Millisecond},
		{Upstream: "no-port"},
	} {
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

func TestUnknownEDNSVersionGetsBADVERS(t *testing.T) {
	s := startServer(t, dns.Options{}, fleet...)
	m := new(mdns.Msg)
	m.SetQuestion("web.switchboard.", mdns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	resp, _, err := (&mdns.Client{Net: "udp", Timeout: wait}).Exchange(m, s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Rcode != mdns.RcodeBadVers || resp.IsEdns0() == nil {
		t.Errorf("EDNS version 1: %s (OPT %v), want BADVERS with an OPT record", mdns.RcodeToString[resp.Rcode], resp.IsEdns0())
	}
}
