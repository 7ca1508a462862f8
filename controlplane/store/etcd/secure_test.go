package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// TestTLSAndAuth: against an etcd that requires client certificates and passwords,
// with a user that may only touch /cp/, the store opens with the right settings and
// writes; each wrong one is refused at Open with an error that says what failed.
func TestTLSAndAuth(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	ca, err := tlstest.NewCA("etcd test ca")
	must(t, err)
	server, err := ca.Issue("", "127.0.0.1")
	must(t, err)
	sf, err := ca.WriteFiles(dir, "server", server)
	must(t, err)
	client, err := ca.Issue("", "client")
	must(t, err)
	cf, err := ca.WriteFiles(dir, "client", client)
	must(t, err)
	c := embedetcd.New(t, embedetcd.Options{
		TLS:       &embedetcd.TLS{CertFile: sf.Cert, KeyFile: sf.Key, CAFile: sf.CA, ClientCertAuth: true},
		Configure: func(cfg *embed.Config) { cfg.BcryptCost = 4 }, // passwords are checked, not their hashing
	})
	tlsConf, err := tlsutil.ClientConfig(cf, "", "")
	must(t, err)
	enableAuth(t, ctx, c.Endpoints(), cf)

	good := cpetcd.Options{Endpoints: c.Endpoints(), Prefix: "/cp/", TLS: tlsConf, Username: "cp", Password: "cppw", DialTimeout: 3 * time.Second}
	s, err := cpetcd.Open(ctx, good)
	must(t, err)
	must(t, s.CreateSegment(ctx, "seg"))
	must(t, s.Close())

	noCert, err := tlsutil.ClientConfig(tlsutil.Files{CA: cf.CA}, "", "")
	must(t, err)
	for _, bad := range []struct {
		name string
		o    func(o *cpetcd.Options)
		want string
	}{
		{"wrong password", func(o *cpetcd.Options) { o.Password = "nope" }, "authentication failed"},
		{"no client certificate", func(o *cpetcd.Options) { o.TLS = noCert }, "no answer within"},
		{"prefix not granted", func(o *cpetcd.Options) { o.Prefix = "/other/" }, "permission denied"},
	} {
		o := good
		bad.o(&o)
		s, err := cpetcd.Open(ctx, o)
		if err == nil {
			_ = s.Close()
			t.Errorf("%s: opened", bad.name)
			continue
		}
		if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error saying %q", bad.name, err, bad.want)
		}
	}
}

// enableAuth makes a root user and a user "cp" that may read and write /cp/ only,
// then turns authentication on.
func enableAuth(t *testing.T, ctx context.Context, endpoints []string, f tlsutil.Files) {
	t.Helper()
	tc, err := tlsutil.ClientConfig(f, "", "")
	must(t, err)
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	must(t, err)
	defer c.Close()
	for i, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "cp"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "cp", "/cp/", clientv3.GetPrefixRangeEnd("/cp/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "cp", "cppw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "cp", "cp"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
}
