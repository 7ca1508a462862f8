package etcd

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/toxictest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The path from a registry to one member of a three-member cluster goes silent
// (a partition between them; the member is fine and keeps its quorum) and stays
// silent. Each member's path in turn, so that one of them carries the watch: the
// watch still delivers another writer's change, and writes still land, within
// 40 s. (Before the client had keepalives, a silent path was never noticed: the
// watch on it went deaf until the path healed, and a write sent on it waited for
// its deadline.)
func TestSilentPathToOneMember(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var proxies []*toxictest.Proxy
	var viaProxies []string
	for i, m := range c.Members() {
		u, err := url.Parse(m.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		p := toxictest.Start(t, fmt.Sprintf("member-%d", i), u.Host)
		proxies = append(proxies, p)
		viaProxies = append(viaProxies, "http://"+p.Addr())
	}
	prefix := uniquePrefix(t)
	r, err := New(ctx, Options{Endpoints: viaProxies, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := New(ctx, Options{Endpoints: c.Endpoints(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())
	for i, p := range proxies {
		p.BlackHole()
		theirs := ep("prod", "web", "http", fmt.Sprintf("10.1.%d.1", i), 80)
		applyRetrying(t, other, registry.Register(theirs))
		waitEvent(t, ch, 40*time.Second, added(theirs), fmt.Sprintf("with the path to member %d silent", i))
		ours := ep("prod", "web", "http", fmt.Sprintf("10.2.%d.1", i), 80)
		applyRetrying(t, r, registry.Register(ours))
		waitEvent(t, ch, 40*time.Second, added(ours), fmt.Sprintf("our write, with the path to member %d silent", i))
		p.Heal()
	}
}

// waitEvent waits up to d for want; any other event fails the test.
func waitEvent(t *testing.T, ch <-chan registry.Event, d time.Duration, want registry.Event, what string) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("%s: watch ended", what)
		}
		if got.Type != want.Type || !endpoint.Equal(got.Endpoint, want.Endpoint) {
			t.Fatalf("%s: got %s %+v, want %s %+v", what, got.Type, got.Endpoint, want.Type, want.Endpoint)
		}
	case <-time.After(d):
		t.Fatalf("%s: no %s %s within %s", what, want.Type, want.Endpoint.Key(), d)
	}
}
