package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const star = "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n"

func testConfig(t *testing.T, yml string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	c.Northbound.Endpoint, c.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
	c.Reconciler.BaseRetryDelay = 10 * time.Millisecond
	return c
}

// run starts the server and returns a stop function that returns Run's error.
func run(t *testing.T, o server.Options) (*server.Server, func() error) {
	t.Helper()
	srv, err := server.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("server did not stop")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return srv, stop
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHealthAndMetrics: /healthz, /readyz and /metrics on the HTTP port, with the
// nodes, links and routes by status, queue depth, reconcile timings and registrations.
func TestHealthAndMetrics(t *testing.T) {
	srv, stop := run(t, server.Options{Config: testConfig(t, star), MetricsListen: "127.0.0.1:0"})
	f := cpharness.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: "n1", Target: srv.SouthboundAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := deadline(t)
	if err := f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Node("edge/n1").Announce(dataplane.NewName("org", "ns", "svc")); err != nil {
		t.Fatal(err)
	}
	if err := cpharness.Eventually(ctx, func() error {
		if rs, _ := srv.Store().ListRoutes(ctx, store.RouteFilter{}); len(rs) < 2 {
			return errors.New("routes not expanded yet")
		}
		return cpharness.Converged(ctx, srv.Store(), f, true)
	}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.MetricsAddr()
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d", code)
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		"switchboard_controlplane_nodes_connected 2",
		`switchboard_controlplane_links{status="applied"} 1`,
		`switchboard_controlplane_links{status="pending"} 0`,
		`switchboard_controlplane_routes{status="applied"} 1`,
		"switchboard_controlplane_wildcard_routes 1",
		`switchboard_controlplane_queue_depth{queue="link"}`,
		`switchboard_controlplane_queue_depth{queue="route"}`,
		`switchboard_controlplane_reconcile_duration_seconds_count{queue="link"}`,
		`switchboard_controlplane_registrations_total{outcome="accepted"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	f.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestMTLS: both endpoints on TLS, the southbound one requiring client certificates.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) tlsutil.Files {
		leaf, err := ca.Issue("spiffe://cloud/"+name, "127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		files, err := ca.WriteFiles(dir, name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	srvFiles, nodeFiles := issue("server"), issue("node")
	cfg := testConfig(t, star)
	cfg.Southbound.TLS = config.TLS{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, CAFile: srvFiles.CA}
	cfg.Northbound.TLS = config.TLS{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key}
	srv, _ := run(t, server.Options{Config: cfg})

	clientTLS := func(f tlsutil.Files) grpc.DialOption {
		conf, err := tlsutil.ClientConfig(f, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return grpc.WithTransportCredentials(credentials.NewTLS(conf))
	}
	fab := cpharness.NewFabric()
	defer fab.Close()
	good, err := fab.Start(cpharness.NodeConfig{Group: "cloud", ID: "n1", Target: srv.SouthboundAddr(), DialOptions: []grpc.DialOption{clientTLS(nodeFiles)}})
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := fab.Start(cpharness.NodeConfig{Group: "cloud", ID: "n2", Target: srv.SouthboundAddr(),
		DialOptions: []grpc.DialOption{clientTLS(tlsutil.Files{CA: srvFiles.CA})}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := fab.Start(cpharness.NodeConfig{Group: "cloud", ID: "n3", Target: srv.SouthboundAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := deadline(t)
	if err := good.Controller().WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cpharness.Eventually(ctx, func() error {
		if noCert.Controller().Stats().Attempts < 2 || plain.Controller().Stats().Attempts < 2 {
			return errors.New("still on the first attempt")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*cpharness.Node{noCert, plain} {
		if st := n.Controller().Stats(); st.Registrations != 0 {
			t.Fatalf("%s registered without a client certificate: %+v", n.ID(), st)
		}
	}

	nb := func(opt grpc.DialOption) error {
		conn, err := grpc.NewClient(srv.NorthboundAddr(), opt)
		if err != nil {
			return err
		}
		defer conn.Close()
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = controlplanev1.NewControlPlaneServiceClient(conn).ListNodes(c, &controlplanev1.ListNodesRequest{})
		return err
	}
	if err := nb(clientTLS(tlsutil.Files{CA: srvFiles.CA})); err != nil {
		t.Fatalf("northbound over TLS: %v", err)
	}
	if err := nb(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Fatal("plaintext client reached the TLS northbound endpoint")
	}
	if err := nb(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}))); err == nil {
		t.Fatal("client that does not trust the CA reached the northbound endpoint")
	}
}

// TestShutdownIsNotACrash: stopping the control plane ends every node stream, and
// none of them is recorded as a node crash (no failover, nodes stay as they were).
func TestShutdownIsNotACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.db")
	cfg := testConfig(t, star+"database:\n  type: sqlite\n  path: "+path+"\n")
	srv, stop := run(t, server.Options{Config: cfg})
	f := cpharness.NewFabric()
	defer f.Close()
	for _, id := range []string{"n1", "n2"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: "cloud", ID: id, Target: srv.SouthboundAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WaitRegistered(deadline(t)); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nodes, err := st.ListNodes(context.Background(), store.NodeFilter{})
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes after shutdown: %v, %v", nodes, err)
	}
	for _, n := range nodes {
		if !n.Connected {
			t.Fatalf("shutdown recorded %s as crashed", n.ID)
		}
	}
	if err := srv.Run(context.Background()); err == nil {
		t.Fatal("second Run accepted")
	}
}
