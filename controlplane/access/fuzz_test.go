package access

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// FuzzParseTokens: no token file panics the parser; a rejection matches
// ErrTokenFile; what is accepted has valid names and roles, writes back to a file
// that parses to the same tokens, and names nothing a certificate binding could be.
func FuzzParseTokens(f *testing.F) {
	line, _ := HashLine("admin", "ci", Generate())
	for _, seed := range []string{
		"", "# comment\n\n" + line + "\n", line + "\n" + line + "\n", "viewer dash sha256:00\n",
		"admin ci " + Hash("x") + "\nviewer ci " + Hash("y") + "\n", "owner x " + Hash("x") + "\n",
		"admin a sha256:" + strings.Repeat("g", 64) + "\n", "\xff\xfe admin", strings.Repeat("a", 70000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		toks, err := ParseTokens(data)
		if err != nil {
			if !errors.Is(err, ErrTokenFile) {
				t.Fatalf("error %v does not match ErrTokenFile", err)
			}
			return
		}
		var lines []string
		for _, tok := range toks.byHash {
			if !tokenName.MatchString(tok.Name) || (tok.Role != Viewer && tok.Role != Admin) {
				t.Fatalf("parsed a bad token %+v", tok)
			}
			// Who a token makes a caller ("token:NAME") is no certificate identity.
			if config.ValidIdentity("token:"+tok.Name) == nil {
				t.Fatalf("token:%s parses as a certificate identity", tok.Name)
			}
			lines = append(lines, tok.Role.String()+" "+tok.Name+" "+hashPrefix+hex.EncodeToString(tok.hash[:]))
		}
		again, err := ParseTokens([]byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatalf("the tokens written back do not parse: %v", err)
		}
		if c := Diff(toks, again); again.Len() != toks.Len() || len(c.Added)+len(c.Removed)+len(c.Changed) > 0 {
			t.Fatalf("written back and parsed again, the tokens changed: %+v", c)
		}
	})
}

// FuzzAuthorizationHeader: whatever authorization headers a call carries, parsing
// them never panics, and a call passes only with one header "Bearer TOKEN" (scheme in
// any case) whose token is in the token file — and is then known by the token's name
// alone, never as a certificate identity.
func FuzzAuthorizationHeader(f *testing.F) {
	dir := f.TempDir()
	viewer, admin := Generate(), Generate()
	lv, _ := HashLine("viewer", "dash", viewer)
	la, _ := HashLine("admin", "ci", admin)
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(lv+"\n"+la+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	a, err := New(Options{Config: config.Authorization{TokenFile: path, Identities: map[string]string{"cn:" + viewer: config.RoleAdmin}}})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		header, second string
	}{
		{"Bearer " + viewer, ""}, {"bearer  " + admin + " ", ""}, {"BEARER\t" + viewer, ""}, {"Bearer", ""},
		{"Basic " + viewer, ""}, {"Bearer " + viewer, "Bearer " + admin}, {"Bearer " + viewer + " x", ""}, {"", ""},
		{"Bearer cn:" + viewer, ""}, {"Bearer token:dash", ""},
	} {
		f.Add(seed.header, seed.second)
	}
	list := controlplanev1.ControlPlaneService_ListSegments_FullMethodName
	f.Fuzz(func(t *testing.T, header, second string) {
		md := metadata.MD{"authorization": {header}}
		if second != "" {
			md.Append("authorization", second)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		token, ok, err := bearer(ctx)
		switch {
		case err != nil && ok, second != "" && err == nil:
			t.Fatalf("bearer(%q, %q) = %q, %v, %v", header, second, token, ok, err)
		case ok && (token == "" || token != strings.TrimSpace(token) || !strings.EqualFold(header[:len("bearer")], "bearer")):
			t.Fatalf("bearer(%q) = %q", header, token)
		}
		caller, _, err := a.authorize(ctx, list)
		tok, known := a.tokens.Load().Lookup(token)
		switch {
		case err == nil && !(ok && known):
			t.Fatalf("%q, %q passed as %+v without a known token", header, second, caller)
		case err == nil && (caller.Via != "token" || caller.Who != "token:"+tok.Name):
			t.Fatalf("a token holder is known as %+v", caller)
		case err != nil && status.Code(err) != codes.Unauthenticated:
			t.Fatalf("%q refused with %v, want Unauthenticated", header, err)
		}
	})
}

// FuzzLeafIdentities: the names read from a certificate keep their kind — written
// out and parsed back as a binding, each is the same identity — and a binding
// grants its role exactly when the certificate has its name in the field of its
// kind: a URI SAN spelled "dns:NAME" or "cn:NAME" is never a DNS SAN or a CN.
func FuzzLeafIdentities(f *testing.F) {
	for _, seed := range [][4]string{
		{"dns:deployer.example.org", "", "", "dns:deployer.example.org"},
		{"cn:grafana", "", "", "cn:grafana"},
		{"uri:spiffe://t/x", "", "", "uri:uri:spiffe://t/x"},
		{"spiffe://t/x", "x", "x", "spiffe://t/x"},
		{"dns://a.b", "a.b", "", "dns:a.b"},
		{"", "a.b", "a.b", "cn:a.b"},
		{"cn://grafana", "", "//grafana", "cn://grafana"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, uri, dns, cn, binding string) {
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		if u, err := url.Parse(uri); err == nil && uri != "" {
			leaf.URIs = []*url.URL{u}
		}
		if dns != "" {
			leaf.DNSNames = []string{dns}
		}
		ids := LeafIdentities(leaf)
		for _, id := range ids {
			if back, err := config.ParseIdentity(id.String()); err == nil && back != id {
				t.Fatalf("%+v is written %q, which parses as %+v", id, id.String(), back)
			}
		}
		b, err := config.ParseIdentity(binding)
		if err != nil {
			return
		}
		a := &Authorizer{identities: map[config.Identity]Role{}}
		if err := a.bind(map[string]string{binding: config.RoleAdmin}); err != nil {
			t.Fatalf("a valid binding %q refused: %v", binding, err)
		}
		if _, role := a.strongest(ids); (role == Admin) != hasName(leaf, b) {
			t.Fatalf("binding %q (%+v) gives %s to URIs %v, DNS %v, CN %q", binding, b, role, leaf.URIs, leaf.DNSNames, cn)
		}
	})
}

// hasName is the oracle: does the certificate carry b's name in b's field?
func hasName(leaf *x509.Certificate, b config.Identity) bool {
	switch b.Kind {
	case config.IdentityURI:
		for _, u := range leaf.URIs {
			if u.String() == b.Name {
				return true
			}
		}
	case config.IdentityDNS:
		for _, d := range leaf.DNSNames {
			if d == b.Name {
				return true
			}
		}
	case config.IdentityCN:
		return leaf.Subject.CommonName == b.Name
	}
	return false
}
