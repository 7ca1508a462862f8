package registrar

import (
	"crypto/x509"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// IdentitySource names the one part of a verified client certificate that is the
// caller's identity. Only that part is read, so that a name of one kind (a DNS
// name a CA signed for a web server) is never taken for another (an agent's ID).
type IdentitySource string

const (
	// IdentitySPIFFE takes the certificate's SPIFFE ID, its only URI SAN, when it
	// belongs to the authorizer's trust domain. The default.
	IdentitySPIFFE IdentitySource = "spiffe"
	// IdentityDNS takes the certificate's first DNS SAN, as "dns:NAME".
	IdentityDNS IdentitySource = "dns"
	// IdentityCN takes the certificate's subject common name, as "cn:NAME".
	IdentityCN IdentitySource = "cn"
)

// The prefixes of DNS and common-name identities: spelled out, as in the control
// plane's, so that a policy written for one kind never matches another.
const (
	dnsPrefix = "dns:"
	cnPrefix  = "cn:"
)

// ParseIdentitySource reads an IdentitySource by name; "" is IdentitySPIFFE.
func ParseIdentitySource(s string) (IdentitySource, error) {
	switch src := IdentitySource(s); src {
	case "":
		return IdentitySPIFFE, nil
	case IdentitySPIFFE, IdentityDNS, IdentityCN:
		return src, nil
	}
	return "", fmt.Errorf("identity source %q: want spiffe, dns or cn", s)
}

// identityOf is the identity a verified certificate names, "" when it names none
// this authorizer accepts.
func (a *Authorizer) identityOf(c *x509.Certificate) string {
	switch a.from {
	case IdentityDNS:
		if len(c.DNSNames) > 0 && c.DNSNames[0] != "" {
			return dnsPrefix + c.DNSNames[0]
		}
	case IdentityCN:
		if c.Subject.CommonName != "" {
			return cnPrefix + c.Subject.CommonName
		}
	default:
		// go-spiffe's parser, not ours: it refuses a second URI SAN, and a query,
		// fragment, port, user or percent-encoding, any of which a hand-written
		// parse could let through into what the node pattern reads.
		id, err := x509svid.IDFromCert(c)
		if err == nil && id.MemberOf(a.trustDomain) {
			return id.String()
		}
	}
	return ""
}

// wants says which identities the authorizer accepts, for refusals and the log.
func (a *Authorizer) wants() string {
	switch a.from {
	case IdentityDNS:
		return "a DNS name (SAN)"
	case IdentityCN:
		return "a subject common name"
	}
	return "a SPIFFE ID of trust domain " + a.trustDomain.Name()
}

// nodeOf is the node an identity may write for, "" when it names none: the node
// pattern's group "node", read from a SPIFFE ID that has a path, or from the name of
// a dns: or cn: identity, when it is a valid node name.
func (a *Authorizer) nodeOf(identity string) string {
	name, ok := nameOf(identity)
	if !ok {
		return ""
	}
	m := a.node.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	if n := m[a.node.SubexpIndex("node")]; isNodeName(n) {
		return n
	}
	return ""
}

// nameOf is what the node pattern reads of an identity. A trust domain's own ID
// (no path) names no workload, and what does not parse as a SPIFFE ID names no one.
func nameOf(identity string) (string, bool) {
	for _, prefix := range []string{dnsPrefix, cnPrefix} {
		if name, ok := strings.CutPrefix(identity, prefix); ok {
			return name, name != ""
		}
	}
	id, err := spiffeid.FromString(identity)
	return identity, err == nil && id.Path() != ""
}

// isNodeName is endpoint's rule for Endpoint.Node (at most 253 printable characters
// without spaces, endpoint/validate.go): a pattern that takes anything else names no node, rather than
// one no endpoint can carry.
func isNodeName(n string) bool {
	return n != "" && len(n) <= 253 && utf8.ValidString(n) &&
		!strings.ContainsFunc(n, func(r rune) bool { return r == ' ' || unicode.IsControl(r) })
}
