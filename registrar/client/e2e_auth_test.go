package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

func issue(t *testing.T, ca *tlstest.CA, id, name string) tlsutil.Files {
	t.Helper()
	leaf, err := ca.Issue(id, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteFiles(t.TempDir(), name, leaf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func runTLSServer(t *testing.T, env *etcdEnv, conf *tls.Config, log io.Writer) *registrar.Server {
	t.Helper()
	return runServerConfig(t, registrar.ServerConfig{Listen: "127.0.0.1:0", TLS: conf,
		Registrar: registrar.Config{Cluster: "east", Backend: env.backend(t), BatchInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(log, nil))}})
}

// runServerConfig runs a registrar server made from sc until the test ends, and
// waits until it is ready.
func runServerConfig(t *testing.T, sc registrar.ServerConfig) *registrar.Server {
	t.Helper()
	s, _ := startServer(t, sc)
	serverReady(t, s)
	return s
}

// serverReady waits until s has read its backend, for at most 30 s.
func serverReady(t testing.TB, s *registrar.Server) {
	t.Helper()
	select {
	case <-s.Registrar().Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("registrar %s not ready within 30s", s.Addr())
	}
}

func openRegistrar(t *testing.T, params map[string]string) registry.Registry {
	t.Helper()
	r, err := registry.Open(testCtx(t), "registrar", params, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// With mTLS on, bad input, writes for another cluster and peers without an
// acceptable certificate all get clear errors, and nothing is stored.
func TestE2ERejectsWithMTLS(t *testing.T) {
	env := newEtcd(t)
	ca, err := tlstest.NewCA("mesh CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	serverFiles := issue(t, ca, "spiffe://mesh.test/registrar", "server")
	agentFiles := issue(t, ca, "spiffe://mesh.test/agent", "agent")
	serverConf, err := tlsutil.ServerConfig(serverFiles, "mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	serverLog := &syncbuf.Buffer{}
	srv := runTLSServer(t, env, serverConf, serverLog)
	address := srv.Addr().String()

	// An authenticated agent sending bad input or another cluster's endpoint.
	agentConf, err := tlsutil.ClientConfig(agentFiles, "", "mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(credentials.NewTLS(agentConf)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := registrarv1.NewRegistrarClient(conn)
	bad := ep("east", "web", "10.0.0.1", 80).ToProto()
	bad.Address = "10.0.0.999"
	_, err = api.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{bad}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "endpoints[0]: invalid endpoint: address") {
		t.Fatalf("bad address: %v, want InvalidArgument naming endpoints[0] address", err)
	}
	_, err = api.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep("west", "web", "10.0.0.1", 80).ToProto()}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `cluster "west"`) {
		t.Fatalf("other cluster: %v, want PermissionDenied naming the cluster", err)
	}

	// Peers that cannot authenticate.
	stranger := issue(t, other, "spiffe://mesh.test/agent", "stranger")
	elsewhere := issue(t, ca, "spiffe://elsewhere.test/agent", "elsewhere")
	for name, params := range map[string]map[string]string{
		"no client certificate":     {client.ParamTLSCA: serverFiles.CA, client.ParamTrustDomain: "mesh.test"},
		"certificate of another CA": {client.ParamTLSCA: serverFiles.CA, client.ParamTLSCert: stranger.Cert, client.ParamTLSKey: stranger.Key, client.ParamTrustDomain: "mesh.test"},
		"another trust domain":      {client.ParamTLSCA: serverFiles.CA, client.ParamTLSCert: elsewhere.Cert, client.ParamTLSKey: elsewhere.Key, client.ParamTrustDomain: "mesh.test"},
	} {
		params[client.ParamAddress] = address
		r := openRegistrar(t, params)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.Apply(ctx, []registry.Op{registry.Register(ep("east", "web", "10.0.0.2", 80))})
		cancel()
		if err == nil || !errors.Is(err, registry.ErrUnavailable) || !strings.Contains(strings.ToLower(err.Error()), "tls") {
			t.Errorf("%s: Apply = %v, want an unavailable error that points at TLS", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// The registrar's log says why, for each refused peer.
	for _, reason := range []string{"client didn't provide a certificate", "is not in trust domain mesh.test"} {
		if !strings.Contains(serverLog.String(), reason) {
			t.Errorf("registrar log does not explain a refusal with %q:\n%s", reason, serverLog)
		}
	}
	if got := env.stored(t); len(got) != 0 {
		t.Fatalf("etcd holds %v after rejected writes, want nothing", got)
	}
	if got := srv.Registrar().Counts(); len(got) != 0 {
		t.Fatalf("the registrar's snapshot holds %v, want nothing", got)
	}

	// The setup itself works: an authenticated agent writes through.
	good := openRegistrar(t, map[string]string{client.ParamAddress: address, client.ParamTLSCA: agentFiles.CA,
		client.ParamTLSCert: agentFiles.Cert, client.ParamTLSKey: agentFiles.Key, client.ParamTrustDomain: "mesh.test"})
	apply(t, good, registry.Register(ep("east", "web", "10.0.0.3", 80)))
	eventually(t, 10*time.Second, "the authorised write is persisted", func() bool { return len(env.stored(t)) == 1 })
}

// mTLS with SVIDs from the SPIFFE Workload API, peers authorised by trust domain.
func TestE2ESPIFFE(t *testing.T) {
	env := newEtcd(t)
	ca, err := tlstest.NewCA("spire")
	if err != nil {
		t.Fatal(err)
	}
	workloadAPI := func(id string) string {
		dir, err := os.MkdirTemp("", "spire")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		leaf, err := ca.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		w, err := tlstest.ServeWorkloadAPI(filepath.Join(dir, "agent.sock"), id, leaf, ca)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w.Addr()
	}
	src, err := tlsutil.NewSource(testCtx(t), workloadAPI("spiffe://mesh.test/registrar"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	conf, err := src.ServerConfig("")
	if err != nil {
		t.Fatal(err)
	}
	srv := runTLSServer(t, env, conf, io.Discard)
	agent := openRegistrar(t, map[string]string{client.ParamAddress: srv.Addr().String(), client.ParamSPIFFE: workloadAPI("spiffe://mesh.test/agent")})
	apply(t, agent, registry.Register(ep("east", "web", "10.0.0.1", 80)))
	eventually(t, 10*time.Second, "the SVID-authenticated write is persisted", func() bool { return len(env.stored(t)) == 1 })

	stranger := openRegistrar(t, map[string]string{client.ParamAddress: srv.Addr().String(),
		client.ParamSPIFFE: workloadAPI("spiffe://other.test/agent"), client.ParamTrustDomain: "mesh.test"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := stranger.Apply(ctx, []registry.Op{registry.Register(ep("east", "web", "10.0.0.2", 80))}); err == nil {
		t.Fatal("a workload of another trust domain wrote through the registrar")
	}
	if got := env.stored(t); len(got) != 1 {
		t.Fatalf("etcd holds %v, want only the authorised write", got)
	}
}
