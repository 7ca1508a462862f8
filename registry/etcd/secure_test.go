package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
)

type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

// newPKI writes a CA, a server certificate for 127.0.0.1 and a client certificate.
func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := pki{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// enableAuth creates a root user and a user "sb" that may read and write only
// under /sb/, then turns authentication on.
func enableAuth(t *testing.T, endpoints []string, p pki) {
	t.Helper()
	ctx := testCtx(t)
	tc, err := tlsConfig(p.ca, p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "sb"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "sb", "/sb/", clientv3.GetPrefixRangeEnd("/sb/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "sb", "sbpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "sb", "sb"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
}

// TestTLSAuthAndOutage opens the backend by name with every security parameter
// against an etcd that requires client certificates and passwords, checks that
// each wrong setting is refused with a clear error, and then takes the server down
// and back up: writes fail as unavailable and name their endpoints, and the open
// registry and its watch recover.
func TestTLSAuthAndOutage(t *testing.T) {
	p := newPKI(t)
	c := embedetcd.New(t, embedetcd.Options{
		TLS: &embedetcd.TLS{CertFile: p.serverCert, KeyFile: p.serverKey, CAFile: p.ca, ClientCertAuth: true},
		// The cheapest bcrypt cost: the test checks passwords, not their hashing.
		Configure: func(cfg *embed.Config) { cfg.BcryptCost = 4 },
	})
	enableAuth(t, c.Endpoints(), p)
	params := map[string]string{
		ParamEndpoints: strings.Join(c.Endpoints(), ","), ParamPrefix: "/sb/",
		ParamCACert: p.ca, ParamCert: p.clientCert, ParamKey: p.clientKey,
		ParamUsername: "sb", ParamPassword: "sbpw",
	}
	openWith := func(change map[string]string) (registry.Registry, error) {
		q := map[string]string{}
		for k, v := range params {
			q[k] = v
		}
		for k, v := range change {
			q[k] = v
		}
		return registry.Open(testCtx(t), "etcd", q, nil)
	}
	for _, bad := range []struct {
		change      map[string]string
		want        string
		unavailable bool // worth retrying, as opposed to a refusal
	}{
		{map[string]string{ParamPassword: "wrong"}, "authentication failed", false},
		{map[string]string{ParamPrefix: "/other/"}, "permission denied", false},
		{map[string]string{ParamCert: "", ParamKey: "", ParamDialTimeout: "1s"}, "check the endpoints and TLS settings", true},
		{map[string]string{ParamCACert: "", ParamDialTimeout: "1s"}, "check the endpoints and TLS settings", true},
	} {
		r, err := openWith(bad.change)
		if err == nil {
			_ = r.Close()
			t.Errorf("Open with %v succeeded", bad.change)
			continue
		}
		if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Open with %v: error %q, want it to mention %q", bad.change, err, bad.want)
		}
		if got := errors.Is(err, registry.ErrUnavailable); got != bad.unavailable {
			t.Errorf("Open with %v: error %q matches ErrUnavailable: %v, want %v", bad.change, err, got, bad.unavailable)
		}
	}

	reg, err := openWith(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx := testCtx(t)
	ch, err := reg.(registry.Watcher).Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())
	a := withTTL(ep("prod", "web", "http", "10.0.0.1", 80), time.Minute)
	mustApply(t, reg, registry.Register(a))
	expectEvents(t, ch, added(a))

	// Outage: the only member goes down.
	c.Member(0).Stop()
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	short, cancel := context.WithTimeout(ctx, time.Second)
	err = reg.Apply(short, []registry.Op{registry.Register(b)})
	cancel()
	var applyErr *registry.ApplyError
	if !errors.Is(err, registry.ErrUnavailable) || !errors.As(err, &applyErr) ||
		len(applyErr.Failed) != 1 || applyErr.Failed[0] != b.Key() {
		t.Fatalf("Apply during an outage = %v; want an ApplyError for %s matching ErrUnavailable", err, b.Key())
	}
	short, cancel = context.WithTimeout(ctx, time.Second)
	_, err = reg.List(short, endpoint.Filter{})
	cancel()
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("List during an outage = %v, want ErrUnavailable", err)
	}

	// Recovery: the same registry writes again and its watch resumes.
	if err := c.Member(0).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	applyRetrying(t, reg, registry.Register(b))
	expectEvents(t, ch, added(b))
	expectQuiet(t, ch)
}
