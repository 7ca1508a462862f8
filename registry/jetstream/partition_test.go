package jetstream_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/internal/toxictest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The path from a registry, opened as commands open it, to one server of a
// three-node cluster goes silent (a partition between them; the server is fine and
// the R3 stream keeps its quorum) and stays silent. Each server's path in turn, so
// that one of them carries the connection: the watch still delivers another
// writer's change, and writes still land, within 40 s. (Before the connection
// pinged more often than nats.go's default, every 2 minutes with 2 unanswered
// allowed, a silent path went unnoticed for up to 6 minutes: writes timed out and
// the watch heard nothing.)
func TestSilentPathToOneServer(t *testing.T) {
	ctx := testCtx(t, 4*time.Minute)
	c, err := embednats.StartCluster(ctx, embednats.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	var proxies []*toxictest.Proxy
	var viaProxies []string
	for i, u := range strings.Split(c.ClientURL(), ",") {
		p := toxictest.Start(t, fmt.Sprintf("server-%d", i), strings.TrimPrefix(u, "nats://"))
		proxies = append(proxies, p)
		viaProxies = append(viaProxies, "nats://"+p.Addr())
	}
	cfg := freshStream()
	open := func(urls string) registry.Registry {
		t.Helper()
		r, err := registry.Open(ctx, "jetstream", map[string]string{
			"nats-url": urls, "stream": cfg.Name, "subject-prefix": cfg.Prefix, "replicas": "3",
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	r := open(strings.Join(viaProxies, ","))
	other := open(c.ClientURL())
	ch, err := r.(registry.Watcher).Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, 10*time.Second, registry.Synced, endpoint.Key{})
	for i, p := range proxies {
		p.BlackHole()
		theirs := ep("prod", "web", "http", fmt.Sprintf("10.1.%d.1", i), 80)
		applyEventually(t, other, []registry.Op{registry.Register(theirs)})
		expectEvent(t, ch, 40*time.Second, registry.Added, theirs.Key())
		ours := ep("prod", "web", "http", fmt.Sprintf("10.2.%d.1", i), 80)
		applyWithin(t, r, 40*time.Second, registry.Register(ours))
		expectEvent(t, ch, 40*time.Second, registry.Added, ours.Key())
		p.Heal()
	}
}

// applyWithin retries Apply, each attempt bounded by 5 s, until it succeeds or d
// passes.
func applyWithin(t *testing.T, r registry.Registry, d time.Duration, ops ...registry.Op) {
	t.Helper()
	var err error
	eventually(t, d, "Apply succeeds", func() bool {
		err = r.Apply(testCtx(t, 5*time.Second), ops)
		return err == nil
	})
}
