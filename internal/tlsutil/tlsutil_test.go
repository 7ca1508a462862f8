package tlsutil_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handshake runs a real TLS handshake over loopback and returns the client's error,
// or the server's if the client saw none.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	serverErr := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		err = c.(*tls.Conn).Handshake()
		if err == nil {
			_, err = c.Write([]byte{1})
		}
		serverErr <- err
	}()
	d := &tls.Dialer{Config: client}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", lis.Addr().String())
	if err == nil {
		// TLS 1.3 reports a rejected client certificate on the first read.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if sErr := <-serverErr; err == nil {
		err = sErr
	}
	return err
}

type pki struct {
	ca, otherCA           *tlstest.CA
	server, client        tlsutil.Files
	outsider, wrongDomain tlsutil.Files
	serverName            string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	ca, err := tlstest.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *tlstest.CA, id, name string) tlsutil.Files {
		leaf, err := ca.Issue(id, "127.0.0.1", "registrar.test")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir())
		f, err := ca.WriteFiles(dir, name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	return pki{
		ca: ca, otherCA: other,
		server:      issue(ca, "spiffe://mesh.test/registrar", "server"),
		client:      issue(ca, "spiffe://mesh.test/agent", "client"),
		outsider:    issue(other, "spiffe://mesh.test/agent", "outsider"),
		wrongDomain: issue(ca, "spiffe://elsewhere.test/agent", "wrong"),
		serverName:  "registrar.test",
	}
}

func TestFilesMTLS(t *testing.T) {
	p := newPKI(t)
	server, err := tlsutil.ServerConfig(tlsutil.Files{CA: p.server.CA, Cert: p.server.Cert, Key: p.server.Key}, "mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	client := func(f tlsutil.Files, keepCert bool) *tls.Config {
		cf := tlsutil.Files{CA: p.server.CA}
		if keepCert {
			cf.Cert, cf.Key = f.Cert, f.Key
		}
		c, err := tlsutil.ClientConfig(cf, p.serverName, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := handshake(t, server, client(p.client, true)); err != nil {
		t.Fatalf("authorised client refused: %v", err)
	}
	for name, c := range map[string]*tls.Config{
		"no certificate":       client(p.client, false),
		"another CA":           client(p.outsider, true),
		"another trust domain": client(p.wrongDomain, true),
	} {
		err := handshake(t, server, c)
		if err == nil {
			t.Errorf("client with %s was accepted", name)
		}
		t.Logf("client with %s: %v", name, err)
	}
}

func TestClientChecksServerTrustDomain(t *testing.T) {
	p := newPKI(t)
	server, err := tlsutil.ServerConfig(tlsutil.Files{Cert: p.server.Cert, Key: p.server.Key}, "")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := tlsutil.ClientConfig(tlsutil.Files{CA: p.server.CA}, "", "mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, ok); err != nil {
		t.Fatalf("server in the trust domain refused: %v", err)
	}
	wrong, err := tlsutil.ClientConfig(tlsutil.Files{CA: p.server.CA}, "", "elsewhere.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, wrong); err == nil || !strings.Contains(err.Error(), "trust domain") {
		t.Fatalf("server outside the trust domain: err = %v, want a trust domain error", err)
	}
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	p := newPKI(t)
	for name, fn := range map[string]func() error{
		"server without key": func() error { _, err := tlsutil.ServerConfig(tlsutil.Files{Cert: p.server.Cert}, ""); return err },
		"domain without CA": func() error {
			_, err := tlsutil.ServerConfig(tlsutil.Files{Cert: p.server.Cert, Key: p.server.Key}, "mesh.test")
			return err
		},
		"cert without key": func() error { _, err := tlsutil.ClientConfig(tlsutil.Files{Cert: p.client.Cert}, "", ""); return err },
		"missing CA file": func() error {
			_, err := tlsutil.ClientConfig(tlsutil.Files{CA: "/nonexistent/ca.pem"}, "", "")
			return err
		},
		"bad trust domain": func() error {
			_, err := tlsutil.ClientConfig(tlsutil.Files{CA: p.server.CA}, "", "Not A Domain")
			return err
		},
	} {
		if err := fn(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// startWorkloadAPI serves an SVID for id on a fresh unix socket.
func startWorkloadAPI(t *testing.T, ca *tlstest.CA, id string) *tlstest.WorkloadAPI {
	t.Helper()
	dir, err := os.MkdirTemp("", "wl")
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
	return w
}

func TestSPIFFESourceMTLS(t *testing.T) {
	ca, err := tlstest.NewCA("spire")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	source := func(id string) *tlsutil.Source {
		s, err := tlsutil.NewSource(ctx, startWorkloadAPI(t, ca, id).Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	srv, agent, stranger := source("spiffe://mesh.test/registrar"), source("spiffe://mesh.test/agent"), source("spiffe://other.test/agent")
	serverConf, err := srv.ServerConfig("") // own trust domain: mesh.test
	if err != nil {
		t.Fatal(err)
	}
	clientConf, err := agent.ClientConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, serverConf, clientConf); err != nil {
		t.Fatalf("SVIDs of one trust domain refused: %v", err)
	}
	strangerConf, err := stranger.ClientConfig("mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	err = handshake(t, serverConf, strangerConf)
	if err == nil {
		t.Fatal("a peer of another trust domain was accepted")
	}
	t.Logf("peer of another trust domain: %v", err)
}

func TestSPIFFESourceUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := tlsutil.NewSource(ctx, "unix:///nonexistent/agent.sock"); err == nil {
		t.Fatal("NewSource succeeded without a workload API")
	}
}
