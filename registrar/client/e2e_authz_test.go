package client_test

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Over real loopback mTLS: an agent may write its own node's endpoints and no one
// else's; a policy grant lets a tooling identity write a whole service.
func TestE2EWritePolicy(t *testing.T) {
	env := newEtcd(t)
	ca, err := tlstest.NewCA("mesh CA")
	if err != nil {
		t.Fatal(err)
	}
	serverFiles := issue(t, ca, "spiffe://mesh.test/registrar", "server")
	serverConf, err := tlsutil.ServerConfig(serverFiles, "mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := registrar.ParsePolicy([]byte(`
grants:
  - identity: spiffe://mesh.test/platform/*
    services: [web]
`))
	if err != nil {
		t.Fatal(err)
	}
	authz, err := registrar.NewAuthorizer(registrar.AuthorizerConfig{TrustDomain: "mesh.test",
		NodePattern: `^spiffe://mesh\.test/node/(?P<node>[^/]+)$`, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	s := runServerConfig(t, registrar.ServerConfig{Listen: "127.0.0.1:0", TLS: serverConf, Metrics: metrics,
		Registrar: registrar.Config{Cluster: "east", Backend: env.backend(t), BatchInterval: 10 * time.Millisecond,
			Authorizer: authz, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	as := func(id, name string) registry.Registry {
		f := issue(t, ca, id, name)
		return openRegistrar(t, map[string]string{client.ParamAddress: s.Addr().String(), client.ParamTLSCA: f.CA,
			client.ParamTLSCert: f.Cert, client.ParamTLSKey: f.Key, client.ParamTrustDomain: "mesh.test"})
	}
	a := as("spiffe://mesh.test/node/node-a", "a")
	b := as("spiffe://mesh.test/node/node-b", "b")
	tool := as("spiffe://mesh.test/platform/deployer", "tool")
	own := func(node, addr string) endpoint.Endpoint {
		e := ep("east", "web", addr, 80)
		e.Node = node
		return e
	}
	denied := func(reason string) float64 {
		return counterValue(t, metrics, "registrar_denied_writes_total", "reason", reason)
	}
	refused := func(r registry.Registry, op registry.Op, rule, reason string) {
		t.Helper()
		before := denied(reason)
		err := r.Apply(testCtx(t), []registry.Op{op})
		if st, _ := status.FromError(err); err == nil || st.Code() != codes.PermissionDenied || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), rule) {
			t.Fatalf("%s of %s = %v, want PermissionDenied naming the rule %q", op.Kind, op.Endpoint.Key(), err, rule)
		}
		if got := denied(reason); got != before+1 {
			t.Fatalf("registrar_denied_writes_total{reason=%q} went from %v to %v, want one more", reason, before, got)
		}
	}

	// a writes its own endpoint; b's client sees it.
	apply(t, a, registry.Register(own("node-a", "10.0.0.1")))
	// b may not register an endpoint of node a, nor take over, update or remove a's.
	refused(b, registry.Register(own("node-a", "10.0.0.2")), "own node", "other_node")
	refused(b, registry.Register(own("node-b", "10.0.0.1")), "belongs to node", "owned_by_other_node")
	refused(b, registry.Unregister(own("", "10.0.0.1")), "belongs to node", "owned_by_other_node")
	// b writes its own.
	apply(t, b, registry.Register(own("node-b", "10.0.0.3")))
	// A tooling identity granted service web writes any of its endpoints, but no other service.
	apply(t, tool, registry.Register(own("node-x", "10.0.0.4")), registry.Unregister(own("", "10.0.0.3")))
	db := ep("east", "db", "10.0.0.5", 5432)
	refused(tool, registry.Register(db), "no policy grant", "no_node")

	want := []string{own("", "10.0.0.1").Key().String(), own("", "10.0.0.4").Key().String()}
	eventually(t, 10*time.Second, "etcd holds only the authorised writes", func() bool { return slices.Equal(env.stored(t), want) })
	if got := keysOf(list(t, a, endpoint.Filter{})); !slices.Equal(got, want) {
		t.Fatalf("agent a sees %v, want %v", got, want)
	}
}

// The authorizer holds identities to its trust domain, and reads them with
// go-spiffe, even when the TLS handshake admits any certificate the CA signed (a
// server made with tlsutil.ServerConfig(files, "")): none of these may act as node-b.
func TestE2EIdentitiesOutsideTheTrustDomainWriteNothing(t *testing.T) {
	env := newEtcd(t)
	ca, err := tlstest.NewCA("shared CA")
	if err != nil {
		t.Fatal(err)
	}
	serverConf, err := tlsutil.ServerConfig(issue(t, ca, "spiffe://mesh.test/registrar", "server"), "")
	if err != nil {
		t.Fatal(err)
	}
	authz, err := registrar.NewAuthorizer(registrar.AuthorizerConfig{TrustDomain: "mesh.test"})
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	s := runServerConfig(t, registrar.ServerConfig{Listen: "127.0.0.1:0", TLS: serverConf, Metrics: metrics,
		Registrar: registrar.Config{Cluster: "east", Backend: env.backend(t), BatchInterval: 10 * time.Millisecond,
			Authorizer: authz, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	as := func(names tlstest.Names) registry.Registry {
		leaf, err := ca.IssueNames(names)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(t.TempDir(), "client", leaf)
		if err != nil {
			t.Fatal(err)
		}
		return openRegistrar(t, map[string]string{client.ParamAddress: s.Addr().String(), client.ParamTLSCA: f.CA,
			client.ParamTLSCert: f.Cert, client.ParamTLSKey: f.Key, client.ParamTrustDomain: "mesh.test"})
	}
	own := ep("east", "web", "10.0.0.2", 80)
	own.Node = "node-b"
	apply(t, as(tlstest.Names{URIs: []string{"spiffe://mesh.test/agent/node-b"}}), registry.Register(own))
	for name, names := range map[string]tlstest.Names{
		"another trust domain": {URIs: []string{"spiffe://evil.test/agent/node-b"}},
		"a query":              {URIs: []string{"spiffe://mesh.test/agent/node-a?x=/node-b"}},
		"DNS SAN only":         {DNSNames: []string{"node-b"}},
		"common name only":     {CommonName: "node-b"},
	} {
		before := counterValue(t, metrics, "registrar_denied_writes_total", "reason", "no_identity")
		err := as(names).Apply(testCtx(t), []registry.Op{registry.Unregister(own)})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "names no identity") || !strings.Contains(err.Error(), "trust domain mesh.test") {
			t.Errorf("%s: unregister node-b's endpoint: %v, want PermissionDenied naming the identity rule", name, err)
		}
		if got := counterValue(t, metrics, "registrar_denied_writes_total", "reason", "no_identity"); got != before+1 {
			t.Errorf("%s: registrar_denied_writes_total{reason=\"no_identity\"} went from %v to %v, want one more", name, before, got)
		}
	}
	eventually(t, 10*time.Second, "etcd holds node-b's endpoint", func() bool { return slices.Equal(env.stored(t), []string{own.Key().String()}) })
}

// counterValue reads one series of a counter from what g gathers.
func counterValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}
