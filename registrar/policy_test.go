package registrar

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestParsePolicyRejectsWhatItCannotMean(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "grant:\n  - identity: x\n", "field grant not found"},
		{"empty identity", "grants:\n  - services: [web]\n", "grants[0].identity: empty"},
		{"star inside", "grants:\n  - identity: spiffe://a/*/b\n    services: [web]\n", "may only end a pattern"},
		{"no services", "grants:\n  - identity: cn:x\n", "grants[0].services"},
		{"bad service", "grants:\n  - identity: cn:x\n    services: [9web]\n", "grants[0].services[0]"},
		{"bad cluster", "grants:\n  - identity: cn:x\n    services: [web]\n    clusters: [\"a b\"]\n", "grants[0].clusters[0]"},
		{"bad reader", "readers: [\"\"]\n", "readers[0]"},
		{"bare name", "grants:\n  - identity: tool\n    services: [web]\n", "grants[0].identity: \"tool\": not an identity"},
		{"bare reader", "readers: [node-1]\n", "readers[0]: \"node-1\": not an identity"},
		{"SPIFFE ID with a query", "grants:\n  - identity: spiffe://td/a?b\n    services: [web]\n", "not a SPIFFE ID"},
		{"SPIFFE prefix with a port", "readers: [\"spiffe://td:8443/*\"]\n", "not a SPIFFE ID"},
		{"kind without a name", "readers: [\"dns:\"]\n", "names no one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParsePolicy = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if p, err := ParsePolicy(nil); err != nil || len(p.Grants) != 0 {
		t.Fatalf("an empty policy = %v, %v; want no grants", p, err)
	}
}

func TestAuthorizerRules(t *testing.T) {
	p, err := ParsePolicy([]byte(`
grants:
  - identity: cn:tool
    services: [web]
    clusters: [east]
  - identity: spiffe://td/admin/*
    services: ["*"]
readers: [spiffe://td/node/*]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthorizer(AuthorizerConfig{TrustDomain: "td", Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	e := ep("east", "web", "10.0.0.1", 80)
	e.Node = "n1"
	other := e
	other.Node = "n2"
	for _, tc := range []struct {
		name     string
		identity string
		op       registry.Op
		cur      *endpoint.Endpoint
		reason   string // "" allowed
	}{
		{"own node", "spiffe://td/node/n1", registry.Register(e), nil, ""},
		{"other node", "spiffe://td/node/n1", registry.Register(other), nil, "other_node"},
		{"taking over", "spiffe://td/node/n2", registry.Register(other), &e, "owned_by_other_node"},
		{"removing another's", "spiffe://td/node/n2", registry.Unregister(e), &e, "owned_by_other_node"},
		{"removing a free key", "spiffe://td/node/n2", registry.Unregister(e), nil, ""},
		{"granted service", "cn:tool", registry.Register(other), &e, ""},
		{"granted service, other cluster", "cn:tool", registry.Register(ep("west", "web", "10.0.0.1", 80)), nil, "other_node"},
		{"admin prefix", "spiffe://td/admin/ops", registry.Register(ep("west", "db", "10.0.0.1", 80)), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := a.check(caller{identity: tc.identity, node: a.nodeOf(tc.identity)}, tc.op, tc.cur)
			switch {
			case tc.reason == "" && d != nil:
				t.Fatalf("refused (%s: %s), want allowed", d.reason, d.msg)
			case tc.reason != "" && (d == nil || d.reason != tc.reason):
				t.Fatalf("check = %+v, want refused by %s", d, tc.reason)
			}
		})
	}
	if !p.mayRead("spiffe://td/node/n9") || p.mayRead("spiffe://td/other") {
		t.Fatal("readers: want node identities in, others out")
	}
	if _, err := NewAuthorizer(AuthorizerConfig{TrustDomain: "td", NodePattern: `[^/]+$`}); err == nil || !strings.Contains(err.Error(), "group named node") {
		t.Fatalf("a pattern without a node group: %v", err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("grants:\n  - identity: spiffe://td/x/*\n    services: [web]\n    clusters: [east]\nreaders: [cn:a]\n"))
	f.Add([]byte("grants: [{identity: dns:x, services: ['*']}]"))
	f.Add([]byte("readers: ['*', 'spiffe://td/a?b']"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParsePolicy(raw)
		if err != nil {
			return
		}
		// Whatever parsed is usable: every grant names an identity and a service,
		// and every pattern is of a kind an identity can match.
		for _, g := range p.Grants {
			if g.Identity == "" || len(g.Services) == 0 {
				t.Fatalf("accepted a grant that names nothing: %+v", g)
			}
		}
		for _, pattern := range append(p.Readers, identitiesOf(p.Grants)...) {
			if !identityKind(pattern) {
				t.Fatalf("accepted identity pattern %q, which no identity can match", pattern)
			}
		}
		_ = p.grant("cn:x", "east", "web")
		_ = p.mayRead("spiffe://td/x")
	})
}

func identitiesOf(grants []Grant) []string {
	var out []string
	for _, g := range grants {
		out = append(out, g.Identity)
	}
	return out
}

// identityKind reports whether pattern is "*" or begins like an identity.
func identityKind(pattern string) bool {
	return pattern == "*" || strings.HasPrefix(pattern, "spiffe://") ||
		strings.HasPrefix(pattern, "dns:") || strings.HasPrefix(pattern, "cn:")
}
