package registry_test

import (
	"context"
	"slices"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Diff reports a key gone as Removed with its key fields, a changed one as
// Updated, a new one as Added, and nothing for one left as it was.
func TestDiff(t *testing.T) {
	a, b, c, d := ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.3"), ep("10.0.0.4")
	a.Node = "n1"
	b2 := b
	b2.Node = "n"
	held := map[endpoint.Key]endpoint.Endpoint{a.Key(): a, b.Key(): b, c.Key(): c}
	state := map[endpoint.Key]endpoint.Endpoint{b.Key(): b2, c.Key(): c, d.Key(): d}
	got := map[endpoint.Key]registry.Event{}
	registry.Diff(held, state, endpoint.Equal, func(t registry.EventType, k endpoint.Key, e endpoint.Endpoint) bool {
		got[k] = registry.Event{Type: t, Endpoint: e}
		return true
	})
	want := map[endpoint.Key]registry.Event{
		a.Key(): {Type: registry.Removed, Endpoint: a.Key().Endpoint()},
		b.Key(): {Type: registry.Updated, Endpoint: b2},
		d.Key(): {Type: registry.Added, Endpoint: d},
	}
	if len(got) != len(want) {
		t.Fatalf("Diff = %v, want %v", got, want)
	}
	for k, w := range want {
		if g := got[k]; g.Type != w.Type || !endpoint.Equal(g.Endpoint, w.Endpoint) {
			t.Fatalf("Diff for %s = %v, want %v", k, g, w)
		}
	}
	if len(held) != 3 || len(state) != 3 {
		t.Fatal("Diff changed its maps")
	}
	n := 0
	if registry.Diff(held, state, endpoint.Equal, func(registry.EventType, endpoint.Key, endpoint.Endpoint) bool { n++; return false }) || n != 1 {
		t.Fatalf("Diff went on after emit said stop: %d events", n)
	}
}

// After a re-read the caller gets only the differences: removals (with the key's
// fields only, the driver having nothing more to say of a gone entry), then
// updates, then additions, each in endpoint order; nothing for an entry the
// re-read left as it was, and no second Synced. A re-read cut short by another
// counts only the second.
func TestFrontSendsOnlyDifferencesAfterReread(t *testing.T) {
	a, b, c, d, e := ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.3"), ep("10.0.0.4"), ep("10.0.0.5")
	a.Node = "n1"
	b2 := b
	b2.Node = "n"
	ev := func(t registry.EventType, e endpoint.Endpoint) registry.Event {
		return registry.Event{Type: t, Endpoint: e}
	}
	s := &script{events: []registry.Event{
		ev(registry.Added, a), ev(registry.Added, b), ev(registry.Added, c), {Type: registry.Synced},
		{Type: registry.Reread}, ev(registry.Added, e), // cut short
		{Type: registry.Reread}, ev(registry.Added, d), ev(registry.Added, c), ev(registry.Added, b),
		ev(registry.Updated, b2), ev(registry.Added, e), ev(registry.Removed, e), {Type: registry.Synced},
	}}
	f := registry.NewFront("script", s)
	defer f.Close()
	ch, err := f.Watch(context.Background(), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 7)
	want := []string{"added 10.0.0.1", "added 10.0.0.2", "added 10.0.0.3", "synced ",
		"removed 10.0.0.1", "updated 10.0.0.2", "added 10.0.0.4"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	expectClosed(t, ch)
}

// A re-read before the first Synced ends the initial state: the caller gets Synced
// once it is done.
func TestFrontRereadBeforeSynced(t *testing.T) {
	a, b := ep("10.0.0.1"), ep("10.0.0.2")
	s := &script{events: []registry.Event{
		{Type: registry.Added, Endpoint: a},
		{Type: registry.Reread}, {Type: registry.Added, Endpoint: b}, {Type: registry.Synced},
	}}
	f := registry.NewFront("script", s)
	defer f.Close()
	ch, err := f.Watch(context.Background(), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 4)
	want := []string{"added 10.0.0.1", "removed 10.0.0.1", "added 10.0.0.2", "synced "}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	expectClosed(t, ch)
}

// Arrange keeps what the filter matches, sorted, and leaves an answer that is
// arranged already as it is, without writing to it.
func TestArrange(t *testing.T) {
	a, b, c := ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.10")
	b.Cluster = "other"
	got := registry.Arrange([]endpoint.Endpoint{c, b, a}, endpoint.Filter{Cluster: "prod"})
	if len(got) != 2 || got[0].Address != "10.0.0.1" || got[1].Address != "10.0.0.10" {
		t.Fatalf("Arrange = %v", got)
	}
	shared := []endpoint.Endpoint{a, c}
	if n := testing.AllocsPerRun(100, func() { registry.Arrange(shared, endpoint.Filter{Cluster: "prod"}) }); n != 0 {
		t.Fatalf("Arrange of an arranged answer allocates %v times", n)
	}
	done := make(chan struct{})
	go func() { // the race detector finds any write
		defer close(done)
		for range 100 {
			_ = shared[0].Address + shared[1].Address
		}
	}()
	registry.Arrange(shared, endpoint.Filter{Cluster: "prod"})
	<-done
}
