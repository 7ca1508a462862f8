package dns

import (
	"cmp"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// addrLabel is the label under the domain that holds one name per address: the
// targets of SRV records, which must be host names, not addresses.
const addrLabel = "addr"

// zone is the set of names served, built once per registry change and then only read.
type zone struct {
	domain string           // lower-case, fully qualified
	names  map[string]*node // lower-case FQDN → its records; empty for an empty non-terminal
	serial uint32           // the SOA serial: grows with every change
	// leftOut counts endpoints some of whose names could not be served: a label
	// over 63 bytes or a name over 255 makes a name nobody can ask for.
	leftOut int
}

// nameServer is the zone's NS target, answered with the server's own address. The
// name is reserved: a service called "ns" keeps its other names.
func (z *zone) nameServer() string { return "ns." + z.domain }

// node is the records of one name.
type node struct {
	addrs []record // A and AAAA
	srvs  []srv
}

type record struct {
	addr     netip.Addr
	priority int
}

type srv struct {
	priority, weight, port int
	target                 string
}

// place is where the agent runs (Options.Region and Zone); the zero value when it
// was not told.
type place struct{ region, zone string }

func (p place) known() bool { return p.region != "" || p.zone != "" }

// distance ranks an endpoint's place from the agent's, as the xDS server ranks it
// from its client's: 0 in the same zone, 1 in the same region, 2 elsewhere. A zone
// is the same only within the same region (zone names need not be unique across
// regions), and an empty name never matches.
func (p place) distance(e endpoint.Endpoint) int {
	switch {
	case p.zone != "" && e.Zone == p.zone && e.Region == p.region:
		return 0
	case p.region != "" && e.Region == p.region:
		return 1
	}
	return 2
}

// recordPriority is e's SRV priority for a querier at p (lower preferred). Unknown
// p: the endpoint priority as is, as before localities. Known p: 3×(priority−1) + 1
// + distance, so that every endpoint of one priority comes before any of the next,
// and within a priority the querier's zone (1, 4, …) before its region (2, 5, …)
// before the rest (3, 6, …); 255 becomes at most 765, within SRV's 16 bits. A
// formula rather than ranks counted per name keeps one endpoint's priority the same
// in every answer.
func (p place) recordPriority(e endpoint.Endpoint) int {
	if !p.known() {
		return e.Priority
	}
	return 3*(e.Priority-1) + 1 + p.distance(e)
}

// newZone builds the names for eps, as answered to a querier at p. Names are
// case-insensitive in DNS, so they are folded to lower case: services "Web" and
// "web" answer as one name.
func newZone(domain string, serial uint32, eps []endpoint.Endpoint, p place) *zone {
	z := &zone{domain: domain, serial: serial, names: map[string]*node{domain: {}}}
	z.add(z.nameServer())
	for _, e := range eps {
		addr, err := netip.ParseAddr(e.Address)
		if err != nil {
			continue // the registry validates addresses; a foreign writer's bad one is skipped
		}
		if !z.addEndpoint(e, addr.Unmap(), p.recordPriority(e)) {
			z.leftOut++
		}
	}
	for _, n := range z.names {
		n.sort()
	}
	return z
}

// addEndpoint adds e's names, its records at priority; it reports false when one of
// the names cannot be a DNS name and was left out (the others are served).
//
// An endpoint that takes no new work (draining, unhealthy) adds its names but no
// record and no SRV target: a service whose every endpoint drains answers NODATA,
// not NXDOMAIN, since it is registered, and resolvers send nothing to it either way.
func (z *zone) addEndpoint(e endpoint.Endpoint, addr netip.Addr, priority int) bool {
	svc, cl, proto := strings.ToLower(e.Service), strings.ToLower(e.Cluster), strings.ToLower(e.Protocol)
	routable := e.Health.Routable()
	all := true
	add := func(name string, records func(*node)) {
		switch n := z.addName(name); {
		case n == nil:
			all = false
		case routable:
			records(n)
		}
	}
	r := record{addr: addr, priority: priority}
	addAddr := func(n *node) { n.addAddr(r) }
	add(svc+"."+cl+"."+z.domain, addAddr)
	add(svc+"."+z.domain, addAddr)
	if e.Port <= 0 {
		return all // no port, no SRV record
	}
	target := addrName(addr, z.domain)
	if routable {
		z.add(target).addAddr(record{addr: addr})
	}
	s := srv{priority: priority, weight: e.Weight, port: e.Port, target: target}
	addSRV := func(n *node) { n.addSRV(s) }
	add("_"+svc+"._"+proto+"."+cl+"."+z.domain, addSRV)
	add("_"+svc+"._"+proto+"."+z.domain, addSRV)
	return all
}

// addName is add for a name built from registry names, which may be too long for
// DNS (a registry name may have 253 bytes, a label 63): nil for such a name.
func (z *zone) addName(name string) *node {
	if _, ok := dns.IsDomainName(name); !ok {
		return nil
	}
	return z.add(name)
}

// addrName is the host name of an address: its bytes in hex under addr.DOMAIN
// (0a000001.addr.DOMAIN for 10.0.0.1).
func addrName(a netip.Addr, domain string) string {
	b := a.AsSlice()
	return hex.EncodeToString(b) + "." + addrLabel + "." + domain
}

// add returns the node of name, creating it and its ancestors up to the domain: an
// ancestor without records of its own exists all the same (an empty non-terminal),
// and is answered with NODATA, not NXDOMAIN.
func (z *zone) add(name string) *node {
	n := z.names[name]
	if n == nil {
		n = &node{}
		z.names[name] = n
		for p := parent(name); p != "" && len(p) > len(z.domain); p = parent(p) {
			if _, ok := z.names[p]; ok {
				break
			}
			z.names[p] = &node{}
		}
	}
	return n
}

func parent(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 && i+1 < len(name) {
		return name[i+1:]
	}
	return ""
}

func (n *node) addAddr(r record) {
	for i, o := range n.addrs {
		if o.addr == r.addr {
			n.addrs[i].priority = min(o.priority, r.priority)
			return
		}
	}
	n.addrs = append(n.addrs, r)
}

func (n *node) addSRV(s srv) {
	for _, o := range n.srvs {
		if o.target == s.target && o.port == s.port {
			return // one address and port in two clusters: one record
		}
	}
	n.srvs = append(n.srvs, s)
}

// sort orders records as a client should try them: lower priority values first,
// then heavier weights, then by address for a stable answer.
func (n *node) sort() {
	slices.SortFunc(n.addrs, func(a, b record) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), a.addr.Compare(b.addr))
	})
	slices.SortFunc(n.srvs, func(a, b srv) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.weight, a.weight),
			cmp.Compare(a.target, b.target), cmp.Compare(a.port, b.port))
	})
}
