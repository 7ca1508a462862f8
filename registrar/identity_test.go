package registrar

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// Which certificates name whom: only the configured kind of name is read, a SPIFFE
// ID only of the trust domain and only as go-spiffe parses it, and a node only
// from an identity.
func TestIdentityOfCertificate(t *testing.T) {
	ca, err := tlstest.NewCA("mesh CA")
	if err != nil {
		t.Fatal(err)
	}
	spiffe := func(ids ...string) tlstest.Names { return tlstest.Names{URIs: ids} }
	for _, tc := range []struct {
		from           IdentitySource
		names          tlstest.Names
		identity, node string
	}{
		{IdentitySPIFFE, spiffe("spiffe://example.org/agent/node-b"), "spiffe://example.org/agent/node-b", "node-b"},
		{IdentitySPIFFE, spiffe("spiffe://evil.org/agent/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org.evil.org/agent/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org/agent/node-a?x=/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org/agent/node-a#/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://node-b@example.org/agent/node-a"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org:443/agent/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org/agent/node-a%2Fnode-b"), "", ""},
		{IdentitySPIFFE, spiffe("https://example.org/agent/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org/agent/node-a", "spiffe://example.org/agent/node-b"), "", ""},
		{IdentitySPIFFE, spiffe("spiffe://example.org"), "spiffe://example.org", ""}, // the trust domain names no node
		{IdentitySPIFFE, tlstest.Names{DNSNames: []string{"node-b"}}, "", ""},
		{IdentitySPIFFE, tlstest.Names{CommonName: "node-b"}, "", ""},
		{IdentityDNS, tlstest.Names{DNSNames: []string{"node-b", "node-c"}, CommonName: "node-x"}, "dns:node-b", "node-b"},
		{IdentityDNS, spiffe("spiffe://example.org/agent/node-b"), "", ""},
		{IdentityDNS, tlstest.Names{CommonName: "node-b"}, "", ""},
		{IdentityCN, tlstest.Names{CommonName: "node-b", DNSNames: []string{"node-x"}}, "cn:node-b", "node-b"},
		{IdentityCN, tlstest.Names{CommonName: "node b"}, "cn:node b", ""}, // no endpoint can carry that node
		{IdentityCN, tlstest.Names{DNSNames: []string{"node-b"}}, "", ""},
	} {
		name := string(tc.from) + " " + strings.Join(append(append(tc.names.URIs, tc.names.DNSNames...), tc.names.CommonName), ",")
		t.Run(name, func(t *testing.T) {
			a, err := NewAuthorizer(AuthorizerConfig{IdentityFrom: tc.from, TrustDomain: "example.org"})
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := ca.IssueNames(tc.names)
			if err != nil {
				t.Fatal(err)
			}
			id := a.identityOf(leaf.Cert)
			if node := a.nodeOf(id); id != tc.identity || node != tc.node {
				t.Fatalf("identity %q, node %q; want %q, %q", id, node, tc.identity, tc.node)
			}
		})
	}
}

// Identities from SPIFFE IDs need the trust domain: without it, any trust domain the
// CA signs for would name the same nodes.
func TestAuthorizerNeedsTheTrustDomain(t *testing.T) {
	for _, cfg := range []AuthorizerConfig{{}, {IdentityFrom: IdentitySPIFFE}, {TrustDomain: "Not A Domain"}} {
		if _, err := NewAuthorizer(cfg); err == nil || !strings.Contains(err.Error(), "trust domain") {
			t.Errorf("NewAuthorizer(%+v) = %v, want an error naming the trust domain", cfg, err)
		}
	}
	if _, err := NewAuthorizer(AuthorizerConfig{IdentityFrom: "uri"}); err == nil || !strings.Contains(err.Error(), "spiffe, dns or cn") {
		t.Errorf("an unknown identity source: %v", err)
	}
	for _, from := range []IdentitySource{IdentityDNS, IdentityCN} {
		if _, err := NewAuthorizer(AuthorizerConfig{IdentityFrom: from}); err != nil {
			t.Errorf("%s identities need no trust domain: %v", from, err)
		}
	}
}
