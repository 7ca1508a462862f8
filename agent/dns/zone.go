package dns

import (
	"cmp"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"

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
}

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

// newZone builds the names for eps. Names are case-insensitive in DNS, so they are
// folded to lower case: services "Web" and "web" answer as one name.
func newZone(domain string, serial uint32, eps []endpoint.Endpoint) *zone {
	z := &zone{domain: domain, serial: serial, names: map[string]*node{domain: {}}}
	for _, e := range eps {
		addr, err := netip.ParseAddr(e.Address)
		if err != nil {
			continue // the registry validates addresses; a foreign writer's bad one is skipped
		}
		addr = addr.Unmap()
		svc, cl, proto := strings.ToLower(e.Service), strings.ToLower(e.Cluster), strings.ToLower(e.Protocol)
		r := record{addr: addr, priority: e.Priority}
		z.add(svc + "." + cl + "." + domain).addAddr(r)
		z.add(svc + "." + domain).addAddr(r)
		if e.Port <= 0 {
			continue // no port, no SRV record
		}
		target := addrName(addr, domain)
		z.add(target).addAddr(record{addr: addr})
		s := srv{priority: e.Priority, weight: e.Weight, port: e.Port, target: target}
		z.add("_" + svc + "._" + proto + "." + cl + "." + domain).addSRV(s)
		z.add("_" + svc + "._" + proto + "." + domain).addSRV(s)
	}
	for _, n := range z.names {
		n.sort()
	}
	return z
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
