package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestAuthorizationSection(t *testing.T) {
	c, err := Parse([]byte(`
northbound:
  endpoint: 0.0.0.0:50051
  tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem}
  authorization:
    identities:
      admin: ["spiffe://example.org/ops/alice", "dns:ci.example.org"]
      viewer: ["cn:dashboard"]
    token_file: /etc/switchboard/tokens
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Authorization{
		Identities: map[string]string{
			"spiffe://example.org/ops/alice": RoleAdmin, "dns:ci.example.org": RoleAdmin, "cn:dashboard": RoleViewer,
		},
		TokenFile: "/etc/switchboard/tokens",
	}
	if !reflect.DeepEqual(c.NorthboundAuthorization, want) || !c.NorthboundAuthorization.Enabled() {
		t.Fatalf("authorization = %+v", c.NorthboundAuthorization)
	}
	if err := c.CheckListeners(); err != nil {
		t.Fatalf("TLS with authorization on 0.0.0.0 refused: %v", err)
	}
	if Default().NorthboundAuthorization.Enabled() {
		t.Fatal("authorization enabled by default")
	}
}

func TestAuthorizationInvalid(t *testing.T) {
	mtls := "northbound:\n  tls: {cert_file: c, key_file: k, ca_file: ca}\n  authorization:\n"
	for _, c := range []struct{ src, want string }{
		{mtls + "    identities: {owner: [cn:x]}\n", `northbound.authorization.identities.owner: unknown key`},
		{mtls + "    identities: {admin: [alice]}\n", `northbound.authorization.identities.admin[0]: "alice" is not an identity`},
		{mtls + "    identities: {admin: [\"dns:\"]}\n", `"dns:" is not an identity`},
		{mtls + "    identities: {admin: [\"spiffe:/x\"]}\n", `"spiffe:/x" is not an identity`},
		{mtls + "    identities: {admin: [cn:a], viewer: [cn:a]}\n", `"cn:a" is already bound to admin`},
		{mtls + "    token_file: \"\"\n", `northbound.authorization.token_file: must not be empty`},
		{"northbound:\n  authorization: {identities: {admin: [cn:a]}}\n", `northbound.authorization.identities: client-certificate identities need tls.ca_file`},
		{"southbound:\n  authorization: {token_file: t}\n", `southbound.authorization: unknown key`},
		{"allow_insecure_remote: yes please\n", `allow_insecure_remote: must be true or false`},
	} {
		_, err := Parse([]byte(c.src))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got  %v\n want %s", c.src, err, c.want)
		}
	}
}

// TestEndpointDefaults: an endpoint without TLS defaults to loopback; with TLS, to
// every interface.
func TestEndpointDefaults(t *testing.T) {
	c, err := Parse([]byte("northbound:\n  tls: {cert_file: c, key_file: k}\nsouthbound: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Northbound.Endpoint != "0.0.0.0:50051" || c.Southbound.Endpoint != "127.0.0.1:50052" {
		t.Fatalf("endpoints %s, %s", c.Northbound.Endpoint, c.Southbound.Endpoint)
	}
}

func TestCheckListeners(t *testing.T) {
	tls := TLS{CertFile: "c", KeyFile: "k"}
	authz := Authorization{TokenFile: "t"}
	secrets := RegistrationAuth{Type: AuthSharedSecret, Secrets: map[string]string{"cloud": strings.Repeat("s", MinSecretLen)}}
	spire := RegistrationAuth{Type: AuthSpire, SocketPath: "/run/spire/api.sock"}
	for _, c := range []struct {
		name         string
		nb, sb       Server
		authz        Authorization
		regAuth      RegistrationAuth // Default's (noop) when zero
		allow        bool
		wantRefusals []string // addresses named, in order; none: accepted
	}{
		{name: "default", nb: Default().Northbound, sb: Default().Southbound},
		{name: "localhost and ::1", nb: Server{Endpoint: "localhost:1", TLS: TLS{Insecure: true}}, sb: Server{Endpoint: "[::1]:2", TLS: TLS{Insecure: true}}},
		{name: "plaintext everywhere", nb: Server{Endpoint: "0.0.0.0:0", TLS: TLS{Insecure: true}}, sb: Server{Endpoint: ":2", TLS: TLS{Insecure: true}}, authz: authz,
			wantRefusals: []string{"northbound endpoint 0.0.0.0:0 is plaintext", "southbound endpoint :2 is plaintext", "southbound endpoint :2 has no registration_auth"}},
		{name: "a name is not trusted to stay loopback", nb: Server{Endpoint: "127.0.0.1:1", TLS: TLS{Insecure: true}}, sb: Server{Endpoint: "cp.internal:2", TLS: TLS{Insecure: true}},
			wantRefusals: []string{"southbound endpoint cp.internal:2", "southbound endpoint cp.internal:2 has no registration_auth"}},
		{name: "TLS without authorization", nb: Server{Endpoint: "0.0.0.0:1", TLS: tls}, sb: Server{Endpoint: "0.0.0.0:2", TLS: tls}, regAuth: secrets,
			wantRefusals: []string{"northbound endpoint 0.0.0.0:1 has no authorization"}},
		{name: "TLS with authorization", nb: Server{Endpoint: "0.0.0.0:1", TLS: tls}, sb: Server{Endpoint: "0.0.0.0:2", TLS: tls}, authz: authz, regAuth: secrets},
		{name: "TLS southbound without registration auth", nb: Server{Endpoint: "127.0.0.1:1", TLS: tls}, sb: Server{Endpoint: "0.0.0.0:50052", TLS: tls},
			wantRefusals: []string{"southbound endpoint 0.0.0.0:50052 has no registration_auth"}},
		{name: "mTLS southbound without registration auth", nb: Server{Endpoint: "127.0.0.1:1", TLS: tls}, sb: Server{Endpoint: "10.0.0.5:50052", TLS: TLS{CertFile: "c", KeyFile: "k", CAFile: "ca"}},
			regAuth: RegistrationAuth{Type: AuthNoop}, wantRefusals: []string{"southbound endpoint 10.0.0.5:50052 has no registration_auth"}},
		{name: "TLS southbound with spire registration auth", nb: Server{Endpoint: "127.0.0.1:1", TLS: tls}, sb: Server{Endpoint: "0.0.0.0:50052", TLS: tls}, regAuth: spire},
		{name: "loopback southbound without registration auth", nb: Server{Endpoint: "127.0.0.1:1", TLS: tls}, sb: Server{Endpoint: "127.0.0.1:50052", TLS: tls}},
		{name: "allowed", nb: Server{Endpoint: "0.0.0.0:0", TLS: TLS{Insecure: true}}, sb: Server{Endpoint: "0.0.0.0:0", TLS: TLS{Insecure: true}}, allow: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.Northbound, cfg.Southbound, cfg.NorthboundAuthorization, cfg.AllowInsecureRemote = c.nb, c.sb, c.authz, c.allow
			if c.regAuth.Type != "" {
				cfg.RegistrationAuth = c.regAuth
			}
			err := cfg.CheckListeners()
			if len(c.wantRefusals) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("err = %v", err)
			}
			for _, w := range c.wantRefusals {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "has no registration_auth") && !strings.Contains(err.Error(), "configure registration_auth (type shared_secret or spire)") {
				t.Errorf("%v does not say how to fix it", err)
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(c.wantRefusals) {
				t.Errorf("%d refusals, want %d: %v", n, len(c.wantRefusals), err)
			}
		})
	}
}

// TestAllowedExposuresAreListed: what allow_insecure_remote lets through is still
// listed, for the start-up warning: a southbound endpoint without registration auth
// beyond loopback among it.
func TestAllowedExposuresAreListed(t *testing.T) {
	c, err := Parse([]byte("allow_insecure_remote: true\nsouthbound:\n  tls: {cert_file: c, key_file: k}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckListeners(); err != nil {
		t.Fatalf("allowed exposure refused: %v", err)
	}
	var found bool
	for _, p := range c.Insecurities() {
		found = found || strings.Contains(p.What, "southbound endpoint 0.0.0.0:50052 has no registration_auth") && strings.Contains(p.Fix, "registration_auth")
	}
	if !found {
		t.Fatalf("Insecurities = %+v, want the southbound without registration auth", c.Insecurities())
	}
}
