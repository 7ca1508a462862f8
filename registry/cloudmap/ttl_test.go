package cloudmap

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestExpiredInstancesReaped: List hides an expired instance at once and the
// reaper then deregisters it from Cloud Map; entries without a TTL stay.
func TestExpiredInstancesReaped(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	short := ep("prod", "web", "http", "10.0.0.1", 80)
	short.TTL = endpoint.TTL(5 * time.Second)
	never := ep("prod", "web", "http", "10.0.0.2", 80)
	never.TTL = endpoint.Never
	unset := ep("prod", "web", "http", "10.0.0.3", 80)
	f.apply(registry.Register(short), registry.Register(never), registry.Register(unset))

	attrs, _ := f.fake.Instance(short.InstanceID())
	wantExpiry := strconv.FormatInt(f.clock.Now().Add(5*time.Second).UnixMilli(), 10)
	if attrs["expiry"] != wantExpiry || attrs["ttl"] != "5s" {
		t.Fatalf("stored ttl/expiry = %q/%q, want 5s/%s", attrs["ttl"], attrs["expiry"], wantExpiry)
	}
	if len(f.list(endpoint.Filter{})) != 3 {
		t.Fatal("an unexpired entry is missing")
	}
	f.clock.Advance(5 * time.Second)
	want := keyStrings([]endpoint.Endpoint{never, unset})
	if got := keyStrings(f.list(endpoint.Filter{})); !slices.Equal(got, want) {
		t.Fatalf("List at the expiry = %v, want %v", got, want)
	}
	f.eventually("expired instance deregistered from Cloud Map", func() bool {
		_, ok := f.fake.Instance(short.InstanceID())
		return !ok
	})
	if f.fake.InstanceCount() != 2 {
		t.Fatalf("fake holds %d instances, want the 2 without a TTL", f.fake.InstanceCount())
	}
}

// TestReaperSparesRefreshedAndBusy: the reaper re-reads an instance before removing
// it, and skips instances this process is writing.
func TestReaperSparesRefreshedAndBusy(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.TTL = endpoint.TTL(5 * time.Second)
	f.apply(registry.Register(e))
	svcID, _, err := f.reg.serviceID(f.ctx, "web", false)
	if err != nil {
		t.Fatal(err)
	}
	it := reapItem{svcID, e.InstanceID()}

	// Seen expired by a List, then refreshed before the reaper got to it.
	f.clock.Advance(10 * time.Second)
	f.apply(registry.Register(e))
	if err := f.reg.reapOne(f.ctx, it); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.fake.Instance(e.InstanceID()); !ok || f.fake.Calls("DeregisterInstance") != 0 {
		t.Fatal("the reaper removed a refreshed instance")
	}

	f.clock.Advance(10 * time.Second)
	f.reg.busy.add([]string{e.InstanceID()})
	gets := f.fake.Calls("GetInstance")
	if err := f.reg.reapOne(f.ctx, it); err != nil {
		t.Fatal(err)
	}
	if f.fake.Calls("GetInstance") != gets || f.fake.Calls("DeregisterInstance") != 0 {
		t.Fatal("the reaper touched an instance being written")
	}
	f.reg.busy.remove([]string{e.InstanceID()})

	if err := f.reg.reapOne(f.ctx, it); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.fake.Instance(e.InstanceID()); ok {
		t.Fatal("the reaper left an expired, idle instance")
	}
	// Reaping something already gone is quiet.
	if err := f.reg.reapOne(f.ctx, it); err != nil {
		t.Fatalf("reaping a missing instance: %v", err)
	}
}
