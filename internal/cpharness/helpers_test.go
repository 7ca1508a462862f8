package cpharness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(removeBinary)) }

// stores are the databases every scenario runs on.
var stores = []string{config.DatabaseInMemory, config.DatabaseSQLite}

func forStores(t *testing.T, fn func(t *testing.T, db string)) {
	for _, db := range stores {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			fn(t, db)
		})
	}
}

// testConfig is a control plane on loopback ports with fast retries and no sweep
// unless a test asks for one. topology "" is API mode.
func testConfig(t *testing.T, db, topology string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(topology))
	if err != nil {
		t.Fatal(err)
	}
	c.Northbound.Endpoint, c.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
	c.Database = config.Database{Type: db}
	if db == config.DatabaseSQLite {
		c.Database.Path = filepath.Join(t.TempDir(), "cp.db")
	}
	c.Reconciler = config.Reconciler{MaxRequeues: 15, BaseRetryDelay: 10 * time.Millisecond, Workers: 4}
	return c
}

// cp is a running control plane.
type cp struct {
	*server.Server
	stop func()
}

func startCP(t *testing.T, cfg *config.Config, opts ...func(*server.Options)) *cp {
	t.Helper()
	o := server.Options{Config: cfg, Logger: testLogger(), RequestTimeout: 10 * time.Second}
	for _, fn := range opts {
		fn(&o)
	}
	srv, err := server.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	c := &cp{Server: srv}
	c.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("control plane run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("control plane did not stop")
		}
	}
	t.Cleanup(c.stop)
	return c
}

// testLogger is silent unless E2E_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("E2E_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newFabric(t *testing.T) *Fabric {
	f := NewFabric()
	t.Cleanup(f.Close)
	return f
}

// nodes starts perGroup nodes n1.. in each group against the control plane.
func startNodes(t *testing.T, f *Fabric, c *cp, perGroup int, groups ...string) []*Node {
	t.Helper()
	var out []*Node
	for _, g := range groups {
		for i := 1; i <= perGroup; i++ {
			n, err := f.Start(NodeConfig{Group: g, ID: fmt.Sprintf("n%d", i), Target: c.SouthboundAddr()})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
	}
	return out
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// converge waits for the store and the datapaths to agree, and to stay so: the core
// writes a change in several steps (a claim marks the link Applied, then expands the
// routes over it), so one agreeing look can fall between two of them.
func converge(t *testing.T, c *cp, f *Fabric, strict bool, extra ...func() error) {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	if err := f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	var last string
	var since time.Time
	err := Eventually(ctx, func() error {
		err := Converged(ctx, c.Store(), f, strict)
		for _, fn := range extra {
			if err == nil {
				err = fn()
			}
		}
		if err != nil {
			last = ""
			return err
		}
		if fp := fingerprint(t, c.Store()); fp != last {
			last, since = fp, time.Now()
		}
		if time.Since(since) < 200*time.Millisecond {
			return errors.New("not stable yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("not converged: %v", err)
	}
}

// fingerprint identifies the store's links and routes with their states.
func fingerprint(t *testing.T, st store.Store) string {
	links, err := st.ListLinks(context.Background(), store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := st.ListRoutes(context.Background(), store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range links {
		fmt.Fprintf(&b, "%s %s %s %s;", l.ID, l.SourceNodeID, l.DestNodeID, l.Status)
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "%d %s %s;", r.ID, r.SourceNodeID, r.Status)
	}
	return b.String()
}

var svcName = dataplane.NewName("org", "ns", "svc")

// linkPairs lists the live links as sorted "groupA-groupB" pairs.
func linkPairs(t *testing.T, st store.Store) []string {
	t.Helper()
	links, err := st.ListLinks(context.Background(), store.LinkFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		a, b := l.SourceGroup, l.DestGroup
		if b < a {
			a, b = b, a
		}
		out = append(out, a+"-"+b)
	}
	slices.Sort(out)
	return out
}

func routesOf(t *testing.T, st store.Store) []store.Route {
	t.Helper()
	rs, err := st.ListRoutes(context.Background(), store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Route
	for _, r := range rs {
		if !r.IsTemplate() {
			out = append(out, r)
		}
	}
	return out
}

func newServer(cfg *config.Config) (*server.Server, error) {
	return server.New(context.Background(), server.Options{Config: cfg, Logger: testLogger()})
}
