package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// clientNames dials as the holder of a certificate carrying exactly the names n.
func (r *rig) clientNames(n tlstest.Names) controlplanev1.ControlPlaneServiceClient {
	r.t.Helper()
	leaf, err := r.ca.IssueNames(n)
	if err != nil {
		r.t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		r.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert)
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close() })
	return controlplanev1.NewControlPlaneServiceClient(conn)
}

// TestIdentityKindsAreNotConfused: a binding names the certificate field it is read
// from, and matches that field only. A URI SAN spelled like a DNS or CN binding
// ("dns:deployer.example.org", "cn:grafana") gets no role; the DNS SAN and the
// common name themselves do. Real certificates over a real TLS connection.
func TestIdentityKindsAreNotConfused(t *testing.T) {
	r := newRig(t, config.Authorization{Identities: map[string]string{
		"dns:deployer.example.org": config.RoleAdmin,
		"cn:grafana":               config.RoleViewer,
		"spiffe://test/ops":        config.RoleAdmin,
	}})
	bg := context.Background()
	for _, c := range []struct {
		name   string
		names  tlstest.Names
		mutate bool
		code   codes.Code
		msg    string
	}{
		{"URI SAN spelled as a DNS binding", tlstest.Names{URIs: []string{"dns:deployer.example.org"}}, true,
			codes.PermissionDenied, "uri:dns:deployer.example.org has no role"},
		{"URI SAN spelled as a CN binding", tlstest.Names{URIs: []string{"cn:grafana"}}, false,
			codes.PermissionDenied, "uri:cn:grafana has no role"},
		{"URI SAN with a DNS binding's scheme and //", tlstest.Names{URIs: []string{"dns://deployer.example.org"}}, true,
			codes.PermissionDenied, "has no role"},
		{"common name spelled as a DNS binding", tlstest.Names{CommonName: "dns:deployer.example.org"}, true,
			codes.PermissionDenied, "has no role"},
		{"DNS SAN spelled as a CN binding", tlstest.Names{DNSNames: []string{"cn.grafana"}, CommonName: "deployer.example.org"}, false,
			codes.PermissionDenied, "has no role"},
		{"the DNS SAN itself", tlstest.Names{DNSNames: []string{"deployer.example.org"}}, true, codes.OK, ""},
		{"the common name itself", tlstest.Names{CommonName: "grafana"}, false, codes.OK, ""},
		{"the common name cannot mutate", tlstest.Names{CommonName: "grafana"}, true, codes.PermissionDenied, "cn:grafana has role viewer"},
		{"the URI SAN itself", tlstest.Names{URIs: []string{"spiffe://test/ops"}}, true, codes.OK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := call(t, bg, r.clientNames(c.names), c.mutate)
			if code != c.code || !containsAll(msg, c.msg) {
				t.Fatalf("got %s %q, want %s %q", code, msg, c.code, c.msg)
			}
		})
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
