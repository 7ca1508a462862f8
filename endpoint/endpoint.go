package endpoint

import (
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Endpoint is one reachable instance of a service.
type Endpoint struct {
	Cluster  string
	Service  string
	Protocol string
	// Address is an IPv4 or IPv6 address in canonical form (see Normalize).
	Address string
	// Port is 0..65535; 0 means the endpoint has no port (file_sd skips it).
	Port int
	// Node names the machine that registered the endpoint; optional, not part of the key.
	Node string
	// Priority is 1..255, carried for downstream consumers such as SRV-style weighting.
	Priority int
	// Weight is 0..65535, carried for load balancers; 0 means "no preference".
	Weight      int
	Annotations map[string]string
	// TTL is how long the registration lives unless refreshed.
	TTL TTL
	// Region and Zone place the endpoint (optional; a zone needs no region). Proxies
	// balance by them: xDS groups endpoints into localities, DNS prefers the querier's
	// zone. They are names, validated like Service.
	Region string
	Zone   string
	// Health is Healthy unless the endpoint is Unhealthy or Draining; readers that
	// route (xDS, DNS) send new work to healthy endpoints only.
	Health Health
}

// Key is an endpoint's identity: two endpoints with the same key are the same entry.
type Key struct {
	Cluster  string
	Service  string
	Protocol string
	Address  string
	Port     int
}

// Key returns the endpoint's identity.
func (e Endpoint) Key() Key {
	return Key{Cluster: e.Cluster, Service: e.Service, Protocol: e.Protocol, Address: e.Address, Port: e.Port}
}

// InstanceID is the endpoint's stable instance id (see Key.InstanceID).
func (e Endpoint) InstanceID() string { return e.Key().InstanceID() }

// Clone returns a copy that shares no memory with e.
func (e Endpoint) Clone() Endpoint {
	if e.Annotations != nil {
		e.Annotations = maps.Clone(e.Annotations)
	}
	return e
}

// Equal reports whether a and b carry the same fields, annotations included.
func Equal(a, b Endpoint) bool {
	if a.Key() != b.Key() || a.Node != b.Node || a.Priority != b.Priority ||
		a.Weight != b.Weight || a.TTL != b.TTL || a.Region != b.Region || a.Zone != b.Zone ||
		a.Health != b.Health || len(a.Annotations) != len(b.Annotations) {
		return false
	}
	for k, v := range a.Annotations {
		if w, ok := b.Annotations[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Normalize puts the address in canonical form (lower-case, shortest IPv6 form), so
// that one address has one key and one instance id. Unparseable addresses are left for
// Validate to report.
func (e *Endpoint) Normalize() {
	e.Address = canonicalAddress(e.Address)
}

func canonicalAddress(s string) string {
	if !strings.Contains(s, ":") {
		// Not IPv6: an IPv4 address that parses is canonical already (ParseAddr
		// refuses leading zeros, zones and other spellings), and anything else is
		// kept as it is. This skips the parse for the common case, and for the empty
		// unset filter field, whose ParseAddr error would allocate.
		return s
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return s
	}
	// Most addresses are canonical already: compare before allocating a copy.
	var buf [48]byte
	if canon := a.AppendTo(buf[:0]); string(canon) != s {
		return string(canon)
	}
	return s
}

// InstanceID returns the FNV-1a 64-bit hash of cluster+service+protocol+address+decimal
// port, with no separators, as 16 lower-case hex digits. It is stable across releases:
// JetStream subjects and Cloud Map instance ids are built from it.
func (k Key) InstanceID() string {
	// FNV-1a written out rather than hash/fnv: it keeps the hash allocation-free,
	// and this runs for every key the JetStream backend touches.
	sum := uint64(fnvOffset)
	for _, s := range [...]string{k.Cluster, k.Service, k.Protocol, k.Address} {
		for i := 0; i < len(s); i++ {
			sum = (sum ^ uint64(s[i])) * fnvPrime
		}
	}
	var digits [20]byte
	for _, c := range strconv.AppendInt(digits[:0], int64(k.Port), 10) {
		sum = (sum ^ uint64(c)) * fnvPrime
	}
	var out [16]byte
	const hexdigits = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		out[i] = hexdigits[sum&0xf]
		sum >>= 4
	}
	return string(out[:])
}

// Endpoint is the endpoint with k's fields and nothing else: what a removal names.
func (k Key) Endpoint() Endpoint {
	return Endpoint{Cluster: k.Cluster, Service: k.Service, Protocol: k.Protocol, Address: k.Address, Port: k.Port}
}

// String renders the key as cluster/service/protocol/address:port (IPv6 in brackets).
func (k Key) String() string {
	return k.Cluster + "/" + k.Service + "/" + k.Protocol + "/" + HostPort(k.Address, k.Port)
}

// HostPort joins an address and port as host:port, bracketing IPv6 addresses.
func HostPort(address string, port int) string {
	return net.JoinHostPort(address, strconv.Itoa(port))
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)
