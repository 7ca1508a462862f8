package endpoint

import (
	"cmp"
	"net/netip"
	"slices"
)

// Sort orders endpoints the way every List returns them: by address in numeric IP
// order (IPv4 before IPv6), then port, then cluster, service and protocol so the order
// is total.
func Sort(eps []Endpoint) {
	if len(eps) < 2 {
		return
	}
	order := Order(eps)
	sorted := make([]Endpoint, len(eps))
	for j, i := range order {
		sorted[j] = eps[i]
	}
	copy(eps, sorted)
}

// Order returns the indexes of eps in the order Sort would put them, leaving eps
// as it is: for callers that sort something kept beside each endpoint.
func Order(eps []Endpoint) []int {
	// Parse each address once rather than once per comparison.
	keys := make([]sortKey, len(eps))
	for i := range eps {
		keys[i] = sortKey{addr: parseOrZero(eps[i].Address), i: i}
	}
	slices.SortFunc(keys, func(a, b sortKey) int { return compare(a.addr, &eps[a.i], b.addr, &eps[b.i]) })
	out := make([]int, len(eps))
	for j, k := range keys {
		out[j] = k.i
	}
	return out
}

// Compare orders two endpoints as Sort does.
func Compare(a, b Endpoint) int {
	return compare(parseOrZero(a.Address), &a, parseOrZero(b.Address), &b)
}

type sortKey struct {
	addr netip.Addr
	i    int
}

func compare(aa netip.Addr, a *Endpoint, ba netip.Addr, b *Endpoint) int {
	// netip orders the zero Addr first, then IPv4, then IPv6.
	if c := aa.Compare(ba); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	return cmp.Or(
		cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Cluster, b.Cluster),
		cmp.Compare(a.Service, b.Service),
		cmp.Compare(a.Protocol, b.Protocol),
	)
}

func parseOrZero(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

// IsSorted reports whether eps are in the order Sort puts them. It parses each
// address once and allocates nothing, so checking an answer that is sorted already
// costs far less than sorting it again.
func IsSorted(eps []Endpoint) bool {
	if len(eps) < 2 {
		return true
	}
	prev := parseOrZero(eps[0].Address)
	for i := 1; i < len(eps); i++ {
		cur := parseOrZero(eps[i].Address)
		if compare(prev, &eps[i-1], cur, &eps[i]) > 0 {
			return false
		}
		prev = cur
	}
	return true
}
