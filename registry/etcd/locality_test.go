package etcd

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestLocalityRoundTrip: region, zone and health ride in the JSON value (health
// omitted when healthy) and come back through List and the watch: a change of health
// alone is Updated, and a removal carries the endpoint as last sent. A value another
// writer stored with a state this release does not know reads as unhealthy.
func TestLocalityRoundTrip(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Region, a.Zone, a.Health = "eu-west", "eu-west-1a", endpoint.Draining
	mustApply(t, r, registry.Register(a))
	expectEvents(t, ch, added(a))
	expectStored(t, r, a, `"region":"eu-west"`, `"zone":"eu-west-1a"`, `"health":"draining"`)
	expectListed(t, r, a)

	a.Health = endpoint.Healthy
	mustApply(t, r, registry.Register(a))
	expectEvents(t, ch, updated(a))
	if v := expectStored(t, r, a, `"region":"eu-west"`); strings.Contains(v, "health") {
		t.Errorf("a healthy entry is stored with its health: %s", v)
	}
	expectListed(t, r, a)

	v := expectStored(t, r, a)
	if _, err := r.client.Put(ctx, r.layout.key(a.Key()), strings.Replace(v, `}`, `,"health":"quarantined"}`, 1)); err != nil {
		t.Fatal(err)
	}
	a.Health = endpoint.Unhealthy
	expectEvents(t, ch, updated(a))
	expectListed(t, r, a)

	mustApply(t, r, registry.Unregister(a))
	expectEvents(t, ch, removed(a))
}

// expectStored returns the value stored for e, which must contain each of want.
func expectStored(t *testing.T, r reg, e endpoint.Endpoint, want ...string) string {
	t.Helper()
	got, err := r.client.Get(testCtx(t), r.layout.key(e.Key()))
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get %s: %v, %v", e.Key(), got, err)
	}
	v := string(got.Kvs[0].Value)
	for _, w := range want {
		if !strings.Contains(v, w) {
			t.Errorf("stored value %s lacks %s", v, w)
		}
	}
	return v
}

func expectListed(t *testing.T, r reg, want endpoint.Endpoint) {
	t.Helper()
	got, err := r.List(testCtx(t), endpoint.Filter{Service: want.Service})
	if err != nil || len(got) != 1 || !endpoint.Equal(got[0], want) {
		t.Fatalf("List = %+v, %v; want %+v", got, err, want)
	}
}
