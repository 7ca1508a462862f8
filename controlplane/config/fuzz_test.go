package config

import (
	"errors"
	"testing"
)

// FuzzParse: no input panics; every rejection matches ErrInvalid; every accepted config
// keeps the invariants the control plane relies on.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		specExample, "", "topology: {}\n", "reconciler: {base_retry_delay: abc}\n",
		"topology:\n  segments:\n    - {name: s-$group, links: [{group: cloud, neighbors: [$group]}]}\n",
		"a: &a [*a]\n", "registration_auth: {type: shared_secret, secrets: {a: 0123456789abcdef0123456789abcdef}}\n",
		"northbound: {tls: {cert_file: c, key_file: k}}\n", "- 1\n",
		"northbound: {tls: {cert_file: c, key_file: k, ca_file: ca}, authorization: {identities: {admin: [cn:a], viewer: [\"spiffe://t/x\"]}, token_file: t}}\nallow_insecure_remote: true\n", "null\n", "!!binary aGk=\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		checkInvariants(t, c)
	})
}

func checkInvariants(t *testing.T, c *Config) {
	t.Helper()
	r := c.Reconciler
	if r.Workers < 1 || r.MaxRequeues < 0 || r.BaseRetryDelay <= 0 || r.ReconcilePeriod < 0 {
		t.Fatalf("bad reconciler %+v", r)
	}
	for id, role := range c.NorthboundAuthorization.Identities {
		if ValidIdentity(id) != nil || (role != RoleViewer && role != RoleAdmin) {
			t.Fatalf("bad identity binding %q: %q", id, role)
		}
	}
	if len(c.NorthboundAuthorization.Identities) > 0 && c.Northbound.TLS.CAFile == "" {
		t.Fatal("identities without mTLS")
	}
	if c.Database.Type == DatabaseSQLite && c.Database.Path == "" {
		t.Fatal("sqlite without path")
	}
	if c.Topology != nil && c.Topology.IsEmpty() {
		t.Fatal("empty topology is not API mode")
	}
	if c.Topology != nil {
		for _, s := range c.Topology.Segments {
			if ValidSegmentName(s.Name) != nil || len(s.Links) == 0 {
				t.Fatalf("bad segment %+v", s)
			}
		}
		for _, l := range c.Topology.Links {
			if len(l.Neighbors) == 0 || validLinkGroup(l.Group, false) != nil {
				t.Fatalf("bad link %+v", l)
			}
		}
	}
	for g, s := range c.RegistrationAuth.Secrets {
		if ValidGroupName(g) != nil || len(s) < MinSecretLen {
			t.Fatalf("bad secret for %q", g)
		}
	}
	for _, tls := range []TLS{c.Northbound.TLS, c.Southbound.TLS} {
		if !tls.Insecure && (tls.CertFile == "" || tls.KeyFile == "") {
			t.Fatalf("secure TLS without certificate: %+v", tls)
		}
	}
}
