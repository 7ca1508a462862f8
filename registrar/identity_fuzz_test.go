package registrar

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// FuzzIdentityOfCertificate maps certificates' names to identities and nodes, as the
// registrar does for every write, and checks what must always hold: no panic; a
// SPIFFE identity is the certificate's only URI SAN, parses, and is of the trust
// domain; a URI with a query, fragment, port or user never names anyone; an
// identity is only ever of the configured kind; a node is a valid node name.
func FuzzIdentityOfCertificate(f *testing.F) {
	f.Add("spiffe://example.org/agent/node-b", "node-b", "node-b", `(?P<node>[^/]+)$`)
	f.Add("spiffe://example.org/agent/node-a?x=/node-b", "", "", `(?P<node>[^/]+)$`)
	f.Add("spiffe://evil.org/agent/node-b", "", "", `(?P<node>[^/]+)$`)
	f.Add("spiffe://example.org/agent/node-a#/node-b", "", "", `(?P<node>.*)`)
	f.Add("spiffe://u@example.org:1/node-b", "", "", `(?P<node>.*)`)
	f.Add("spiffe://example.org", "a b", "node-b\x00", `^(?P<node>[^.]+)\.`)
	f.Fuzz(func(t *testing.T, uri, dns, cn, pattern string) {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: []string{dns}}
		u, err := url.Parse(uri)
		if err == nil {
			cert.URIs = []*url.URL{u}
		}
		for _, from := range []IdentitySource{IdentitySPIFFE, IdentityDNS, IdentityCN} {
			a, err := NewAuthorizer(AuthorizerConfig{IdentityFrom: from, TrustDomain: "example.org", NodePattern: pattern})
			if err != nil {
				return // a pattern that does not compile, or has no node group
			}
			id := a.identityOf(cert)
			node := a.nodeOf(id)
			checkIdentity(t, from, cert, id)
			if node != "" && (id == "" || !isNodeName(node)) {
				t.Fatalf("%s: identity %q maps to node %q", from, id, node)
			}
			if u != nil && (u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil || u.Port() != "") && strings.HasPrefix(id, "spiffe:") {
				t.Fatalf("%s: %q is identity %q (node %q)", from, uri, id, node)
			}
		}
	})
}

// checkIdentity fails t unless id is empty or the name of cert the source takes.
func checkIdentity(t *testing.T, from IdentitySource, cert *x509.Certificate, id string) {
	t.Helper()
	if id == "" {
		return
	}
	switch from {
	case IdentitySPIFFE:
		parsed, err := spiffeid.FromString(id)
		if err != nil || parsed.TrustDomain().Name() != "example.org" || len(cert.URIs) != 1 || cert.URIs[0].String() != id {
			t.Fatalf("spiffe: identity %q of URI SAN %v (parse: %v)", id, cert.URIs, err)
		}
	case IdentityDNS:
		if id != "dns:"+cert.DNSNames[0] {
			t.Fatalf("dns: identity %q of DNS SAN %q", id, cert.DNSNames[0])
		}
	case IdentityCN:
		if id != "cn:"+cert.Subject.CommonName {
			t.Fatalf("cn: identity %q of common name %q", id, cert.Subject.CommonName)
		}
	}
}

// FuzzNodeOf reads nodes out of any identity string with any pattern: a node comes
// only from a SPIFFE ID go-spiffe parses, with a path, or from a dns: or cn: name,
// and is a valid node name.
func FuzzNodeOf(f *testing.F) {
	f.Add("spiffe://example.org/agent/node-b", `(?P<node>[^/]+)$`)
	f.Add("spiffe://example.org/agent/node-a?x=/node-b", `(?P<node>[^/]+)$`)
	f.Add("cn:node b", `(?P<node>.*)`)
	f.Add("node-b", `(?P<node>.*)`)
	f.Fuzz(func(t *testing.T, identity, pattern string) {
		a, err := NewAuthorizer(AuthorizerConfig{TrustDomain: "example.org", NodePattern: pattern})
		if err != nil {
			return
		}
		node := a.nodeOf(identity)
		if node == "" {
			return
		}
		if !isNodeName(node) {
			t.Fatalf("%q maps to %q, not a node name", identity, node)
		}
		if strings.HasPrefix(identity, "dns:") || strings.HasPrefix(identity, "cn:") {
			return
		}
		id, err := spiffeid.FromString(identity)
		if err != nil || id.Path() == "" || strings.ContainsAny(identity, "?#@%") {
			t.Fatalf("%q maps to node %q, but is no SPIFFE ID of a workload (%v)", identity, node, err)
		}
	})
}
