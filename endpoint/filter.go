package endpoint

import "net/netip"

// Filter selects endpoints by cluster, protocol, service and address. An empty field
// or "*" matches any value.
type Filter struct {
	Cluster  string
	Protocol string
	Service  string
	Address  string
}

// Any reports whether s is a wildcard: empty or "*".
func Any(s string) bool { return s == "" || s == "*" }

// Match reports whether e passes the filter. Addresses compare as IPs, so
// "2001:DB8::1" matches "2001:db8::1".
func (f Filter) Match(e Endpoint) bool {
	return (Any(f.Cluster) || f.Cluster == e.Cluster) &&
		(Any(f.Protocol) || f.Protocol == e.Protocol) &&
		(Any(f.Service) || f.Service == e.Service) &&
		(Any(f.Address) || f.Address == e.Address || canonicalAddress(f.Address) == e.Address)
}

// Normalize replaces "*" with "" and puts the address in canonical form, so backends
// can compare fields directly.
func (f Filter) Normalize() Filter {
	for _, p := range []*string{&f.Cluster, &f.Protocol, &f.Service, &f.Address} {
		if *p == "*" {
			*p = ""
		}
	}
	f.Address = canonicalAddress(f.Address)
	return f
}

// Validate checks that every set field could match something, so a typo in a filter
// is reported instead of silently matching nothing.
func (f Filter) Validate() error {
	f = f.Normalize()
	for _, c := range [...]struct{ name, value string }{
		{"cluster", f.Cluster}, {"protocol", f.Protocol}, {"service", f.Service},
	} {
		if c.value != "" {
			if err := validateName(c.name, c.value); err != nil {
				return err
			}
		}
	}
	if f.Address != "" {
		if _, err := netip.ParseAddr(f.Address); err != nil {
			return &FieldError{"address", f.Address, "must be an IPv4 or IPv6 address"}
		}
	}
	return nil
}
