package config

import (
	"errors"
	"testing"

	"gopkg.in/yaml.v3"
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

// FuzzParseIdentity: no identity panics the parser; an accepted one keeps its kind
// through String and back, and String names the kind.
func FuzzParseIdentity(f *testing.F) {
	for _, seed := range []string{
		"spiffe://example.org/ops", "dns:deployer.example.org", "cn:grafana", "uri:dns:deployer.example.org",
		"uri:cn:grafana", "dns://deployer.example.org", "cn://x", "uri:uri:x", "dns: x", "cn:", "spiffe:/x", "alice", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseIdentity(s)
		if (err == nil) != (ValidIdentity(s) == nil) {
			t.Fatalf("ParseIdentity and ValidIdentity disagree on %q", s)
		}
		if err != nil {
			return
		}
		back, err := ParseIdentity(id.String())
		if err != nil || back != id {
			t.Fatalf("%q parses as %+v, written %q, parsed back as %+v, %v", s, id, id.String(), back, err)
		}
		prefix := map[IdentityKind]string{IdentityDNS: "dns:", IdentityCN: "cn:"}[id.Kind]
		switch {
		case id.Kind < IdentityURI || id.Kind > IdentityCN || id.Name == "":
			t.Fatalf("%q parses as %+v", s, id)
		case prefix != "" && id.String() != prefix+id.Name:
			t.Fatalf("%+v is written %q", id, id.String())
		case id.Kind == IdentityURI && id.String() != id.Name && id.String() != "uri:"+id.Name:
			t.Fatalf("URI %+v is written %q", id, id.String())
		}
	})
}

// FuzzAuthorizationBindings: a binding in the authorization section is accepted
// exactly when its role and identity are valid, and then binds that identity, with
// the kind it was written with, to that role.
func FuzzAuthorizationBindings(f *testing.F) {
	for _, seed := range [][2]string{
		{RoleAdmin, "dns:deployer.example.org"}, {RoleViewer, "cn:grafana"}, {RoleAdmin, "spiffe://example.org/ops"},
		{RoleAdmin, "uri:dns:x"}, {"owner", "cn:x"}, {RoleViewer, "alice"}, {RoleViewer, "cn: x"}, {RoleAdmin, "dns:a\nb"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, role, identity string) {
		doc, err := yaml.Marshal(map[string]any{"northbound": map[string]any{
			"tls":           map[string]string{"cert_file": "c", "key_file": "k", "ca_file": "ca"},
			"authorization": map[string]any{"identities": map[string][]string{role: {identity}}},
		}})
		if err != nil {
			return
		}
		c, err := Parse(doc)
		valid := (role == RoleViewer || role == RoleAdmin) && ValidIdentity(identity) == nil
		if (err == nil) != valid {
			t.Fatalf("role %q, identity %q: valid %v, Parse: %v", role, identity, valid, err)
		}
		if err != nil {
			return
		}
		if got := c.NorthboundAuthorization.Identities; len(got) != 1 || got[identity] != role {
			t.Fatalf("role %q, identity %q: bound %v", role, identity, got)
		}
		want, _ := ParseIdentity(identity)
		for s := range c.NorthboundAuthorization.Identities {
			if got, err := ParseIdentity(s); err != nil || got != want {
				t.Fatalf("%q was bound as %q (%+v, %v), want %+v", identity, s, got, err, want)
			}
		}
	})
}
