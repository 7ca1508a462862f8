package leastprivilege_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
	sbetcd "github.com/switchboard-mesh/switchboard/registry/etcd"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

// etcdSetup is the etcdctl script of docs/operations.md, "Least-privilege NATS and
// etcd credentials", verbatim (TestDocsShowTheTestedGrants checks it). The tests run
// it through runEtcdctl against an etcd without auth, the way an operator would run
// it once.
const etcdSetup = `# Roles: read and write, or only read, the keys under the prefix.
etcdctl role add switchboard-writer
etcdctl role grant-permission switchboard-writer --prefix=true readwrite /switchboard/endpoints/
etcdctl role add switchboard-reader
etcdctl role grant-permission switchboard-reader --prefix=true read /switchboard/endpoints/

# One user per component.
etcdctl user add switchboard-registrar --new-user-password="$REGISTRAR_PASSWORD"
etcdctl user grant-role switchboard-registrar switchboard-writer
etcdctl user add switchboard-agent --new-user-password="$AGENT_PASSWORD"
etcdctl user grant-role switchboard-agent switchboard-writer
etcdctl user add switchboard-reader --new-user-password="$READER_PASSWORD"
etcdctl user grant-role switchboard-reader switchboard-reader

# Only if auth is not on yet: a root user, then auth. From now on every etcdctl
# command needs --user root (it asks for the password).
etcdctl user add root --new-user-password="$ROOT_PASSWORD"
etcdctl user grant-role root root
etcdctl auth enable
`

var etcdPasswords = map[string]string{
	"REGISTRAR_PASSWORD": "registrar-secret",
	"AGENT_PASSWORD":     "agent-secret",
	"READER_PASSWORD":    "reader-secret",
	"ROOT_PASSWORD":      "root-secret",
}

var etcdUserPassword = map[string]string{
	"switchboard-registrar": etcdPasswords["REGISTRAR_PASSWORD"],
	"switchboard-agent":     etcdPasswords["AGENT_PASSWORD"],
	"switchboard-reader":    etcdPasswords["READER_PASSWORD"],
	"root":                  etcdPasswords["ROOT_PASSWORD"],
	"write-only":            "write-only-secret",
	"no-role":               "no-role-secret",
}

const etcdPrefix = sbetcd.DefaultPrefix

type etcdServer struct {
	endpoints []string
}

// startEtcd starts etcd and runs etcdSetup on it. Before auth goes on, it also adds
// two users for the tests of what is too little: one whose role may write the
// prefix but not read it, and one without a role.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	c := embedetcd.New(t, embedetcd.Options{
		// The cheapest bcrypt cost: the tests check permissions, not hashing.
		Configure: func(cfg *embed.Config) { cfg.BcryptCost = 4 },
	})
	s := &etcdServer{endpoints: c.Endpoints()}
	cli := s.client(t, "")
	ctx := testCtx(t, 30*time.Second)
	extra := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "write-only"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "write-only", etcdPrefix, clientv3.GetPrefixRangeEnd(etcdPrefix), clientv3.PermissionType(clientv3.PermWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "write-only", etcdUserPassword["write-only"]); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "write-only", "write-only"); return err },
		func() error { _, err := cli.UserAdd(ctx, "no-role", etcdUserPassword["no-role"]); return err },
	}
	for i, step := range extra {
		if err := step(); err != nil {
			t.Fatalf("test user setup step %d: %v", i, err)
		}
	}
	runEtcdctl(t, cli, etcdSetup, etcdPasswords)
	return s
}

// client is a raw client as user ("" for none).
func (s *etcdServer) client(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: s.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if user != "" {
		cfg.Username, cfg.Password = user, etcdUserPassword[user]
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client as %q: %v", user, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *etcdServer) params(user string) map[string]string {
	return map[string]string{
		sbetcd.ParamEndpoints: strings.Join(s.endpoints, ","),
		sbetcd.ParamUsername:  user,
		sbetcd.ParamPassword:  etcdUserPassword[user],
	}
}

func (s *etcdServer) open(t *testing.T, user string) registry.Registry {
	t.Helper()
	r, err := registry.Open(testCtx(t, 15*time.Second), "etcd", s.params(user), nil)
	if err != nil {
		t.Fatalf("open etcd as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// runEtcdctl runs the etcdctl commands of script, the few forms the documentation
// uses, through the client API.
func runEtcdctl(t *testing.T, c *clientv3.Client, script string, env map[string]string) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	for line := range strings.Lines(script) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args := shellWords(os.Expand(line, func(k string) string { return env[k] }))
		if args[0] != "etcdctl" {
			t.Fatalf("not an etcdctl command: %s", line)
		}
		var err error
		switch cmd := strings.Join(args[1:3], " "); {
		case cmd == "role add" && len(args) == 4:
			_, err = c.RoleAdd(ctx, args[3])
		case cmd == "role grant-permission" && len(args) == 7 && args[4] == "--prefix=true":
			perm, ok := map[string]clientv3.PermissionType{
				"read": clientv3.PermissionType(clientv3.PermRead), "write": clientv3.PermissionType(clientv3.PermWrite),
				"readwrite": clientv3.PermissionType(clientv3.PermReadWrite),
			}[args[5]]
			if !ok {
				t.Fatalf("%s: unknown permission %q", line, args[5])
			}
			_, err = c.RoleGrantPermission(ctx, args[3], args[6], clientv3.GetPrefixRangeEnd(args[6]), perm)
		case cmd == "user add" && len(args) == 5 && strings.HasPrefix(args[4], "--new-user-password="):
			_, err = c.UserAdd(ctx, args[3], strings.TrimPrefix(args[4], "--new-user-password="))
		case cmd == "user grant-role" && len(args) == 5:
			_, err = c.UserGrantRole(ctx, args[3], args[4])
		case cmd == "auth enable" && len(args) == 3:
			_, err = c.AuthEnable(ctx)
		default:
			t.Fatalf("etcdctl command the test does not know: %s", line)
		}
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
}

// shellWords splits a command line on spaces, honouring double quotes.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

func isPermissionDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || strings.Contains(fmt.Sprint(err), "permission denied")
}

// TestEtcdWriter: a user with the writer role does everything a registrar or agent
// does, TTLs (leases) included, and cannot touch anything outside the prefix.
func TestEtcdWriter(t *testing.T) {
	s := startEtcd(t)
	for _, user := range []string{"switchboard-registrar", "switchboard-agent"} {
		t.Run(user, func(t *testing.T) {
			w := s.open(t, user)
			a := ep("prod", "web-"+user, "10.0.0.1", 80)
			b := withTTL(ep("staging", "web-"+user, "10.0.0.2", 80), time.Hour)
			mustApply(t, w, registry.Register(a), registry.Register(b))
			expectList(t, w, endpoint.Filter{Service: a.Service}, a, b)

			ch := watch(t, w, endpoint.Filter{Service: a.Service})
			expectSynced(t, ch, a, b)
			mustApply(t, w, registry.Unregister(b))
			expectEvent(t, ch, 10*time.Second, registry.Removed, b)
			short := withTTL(ep("prod", a.Service, "10.0.0.4", 80), time.Second)
			mustApply(t, w, registry.Register(short)) // grants a lease
			expectEvent(t, ch, 10*time.Second, registry.Added, short)
			expectEvent(t, ch, 15*time.Second, registry.Removed, short) // the lease expired
			mustApply(t, w, registry.Unregister(a))
			expectEvent(t, ch, 10*time.Second, registry.Removed, a)
			expectList(t, w, endpoint.Filter{Service: a.Service})
		})
	}

	ctx := testCtx(t, 30*time.Second)
	raw := s.client(t, "switchboard-registrar")
	for _, key := range []string{"/switchboard/other", "/switchboard/endpoints", "/switchboard/endpoints-x/a", "/"} {
		if _, err := raw.Put(ctx, key, "x"); !isPermissionDenied(err) {
			t.Errorf("writer Put %s: %v, want permission denied", key, err)
		}
	}
	if _, err := raw.Delete(ctx, "/", clientv3.WithPrefix()); !isPermissionDenied(err) {
		t.Errorf("writer Delete of everything: %v, want permission denied", err)
	}
	if _, err := raw.Get(ctx, "/switchboard/", clientv3.WithPrefix()); !isPermissionDenied(err) {
		t.Errorf("writer Get above its prefix: %v, want permission denied", err)
	}
	if _, err := raw.RoleGrantPermission(ctx, "switchboard-writer", "/", "\x00", clientv3.PermissionType(clientv3.PermReadWrite)); !isPermissionDenied(err) {
		t.Errorf("writer widening its own role: %v, want permission denied", err)
	}
	if _, err := raw.AuthDisable(ctx); !isPermissionDenied(err) {
		t.Errorf("writer AuthDisable: %v, want permission denied", err)
	}
	p := s.params("switchboard-registrar")
	p[sbetcd.ParamPrefix] = "/other/"
	if r, err := registry.Open(ctx, "etcd", p, nil); err == nil {
		_ = r.Close()
		t.Error("the writer opened a registry under another prefix")
	} else if !isPermissionDenied(err) || errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("open under another prefix: %v, want permission denied (not unavailable)", err)
	}
}

// TestEtcdReader: the reader role lists and watches what writers do, expiries
// included, and every write it tries is refused as such (not as an outage).
func TestEtcdReader(t *testing.T) {
	s := startEtcd(t)
	w := s.open(t, "switchboard-registrar")
	rd := s.open(t, "switchboard-reader")
	a := ep("prod", "web", "10.0.0.1", 80)
	mustApply(t, w, registry.Register(a))
	ch := watch(t, rd, endpoint.Filter{})
	expectSynced(t, ch, a)
	b := withTTL(ep("prod", "web", "10.0.0.2", 80), time.Second)
	mustApply(t, w, registry.Register(b))
	expectEvent(t, ch, 10*time.Second, registry.Added, b)
	expectEvent(t, ch, 15*time.Second, registry.Removed, b)
	expectList(t, rd, endpoint.Filter{Service: "web"}, a)

	for _, op := range []registry.Op{
		registry.Register(ep("prod", "web", "10.0.0.9", 80)),
		registry.Register(withTTL(ep("prod", "web", "10.0.0.9", 80), time.Minute)), // grants a lease, then is refused
		registry.Unregister(a),
	} {
		err := rd.Apply(testCtx(t, 10*time.Second), []registry.Op{op})
		var applyErr *registry.ApplyError
		if !errors.As(err, &applyErr) || !isPermissionDenied(err) || errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("reader Apply %s %s: %v, want an ApplyError for permission denied", op.Kind, op.Endpoint.Key(), err)
		}
	}
	expectList(t, w, endpoint.Filter{}, a)
	mustApply(t, w, registry.Unregister(a))
	expectEvent(t, ch, 10*time.Second, registry.Removed, a)
}

// TestEtcdEachGrantIsNeeded: read alone is the reader; write without read cannot
// even open (the open probe, List and Watch read); no role at all is refused.
func TestEtcdEachGrantIsNeeded(t *testing.T) {
	s := startEtcd(t)
	for _, user := range []string{"write-only", "no-role"} {
		r, err := registry.Open(testCtx(t, 15*time.Second), "etcd", s.params(user), nil)
		if err == nil {
			_ = r.Close()
			t.Fatalf("opened as %s", user)
		}
		if !isPermissionDenied(err) {
			t.Fatalf("open as %s: %v, want permission denied", user, err)
		}
	}
	// The write-only role writes, so it is read that the open is missing.
	raw := s.client(t, "write-only")
	if _, err := raw.Put(testCtx(t, 10*time.Second), etcdPrefix+"x", "y"); err != nil {
		t.Fatalf("write-only Put: %v", err)
	}
}

// TestEtcdConformance runs the registry conformance suite as the registrar user;
// root empties the prefix before every check.
func TestEtcdConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite")
	}
	s := startEtcd(t)
	root := s.client(t, "root")
	registrytest.Run(t, func() (registry.Registry, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := root.Delete(ctx, etcdPrefix, clientv3.WithPrefix()); err != nil {
			return nil, fmt.Errorf("empty %s: %w", etcdPrefix, err)
		}
		return registry.Open(ctx, "etcd", s.params("switchboard-registrar"), nil)
	}, registrytest.Options{})
}
