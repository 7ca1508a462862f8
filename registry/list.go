package registry

import "github.com/switchboard-mesh/switchboard/endpoint"

// Arrange makes a backend's read List's answer: it keeps the endpoints f matches,
// in place, and sorts them as endpoint.Sort does. The Front arranges every answer a
// driver's List returns, so a driver may return more than f matches (a key range, a
// table's partition) in any order; a CachedLister that builds a fresh answer
// arranges it with this too.
//
// eps must be the caller's own, but an answer that is arranged already is returned
// without a write: a cache's shared slice may pass through.
func Arrange(eps []endpoint.Endpoint, f endpoint.Filter) []endpoint.Endpoint {
	eps = keep(eps, f)
	if !endpoint.IsSorted(eps) {
		endpoint.Sort(eps)
	}
	return eps
}

// keep drops, in place, the endpoints f does not match; it writes nothing before
// the first of them. A filter on no field skips the pass.
func keep(eps []endpoint.Endpoint, f endpoint.Filter) []endpoint.Endpoint {
	if endpoint.Any(f.Cluster) && endpoint.Any(f.Service) && endpoint.Any(f.Protocol) && endpoint.Any(f.Address) {
		return eps
	}
	for i, e := range eps {
		if f.Match(e) {
			continue
		}
		out := eps[:i]
		for _, e := range eps[i+1:] {
			if f.Match(e) {
				out = append(out, e)
			}
		}
		clear(eps[len(out):]) // what the caller cannot see should not hold memory
		return out
	}
	return eps
}
