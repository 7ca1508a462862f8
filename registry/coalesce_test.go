package registry_test

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestCoalesce(t *testing.T) {
	e := func(addr string, w int) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: "c", Service: "s", Protocol: "http", Address: addr, Port: 80, Priority: 1, Weight: w}
	}
	distinct := []registry.Op{registry.Register(e("10.0.0.1", 1)), registry.Register(e("10.0.0.2", 1)), registry.Unregister(e("10.0.0.3", 0))}
	if got := registry.Coalesce(distinct); len(got) != 3 || &got[0] != &distinct[0] {
		t.Fatalf("a batch of distinct keys came back as %v, want the batch itself", got)
	}
	repeated := []registry.Op{
		registry.Register(e("10.0.0.1", 1)), registry.Register(e("10.0.0.2", 1)),
		registry.Register(e("10.0.0.1", 2)), registry.Register(e("10.0.0.3", 1)), registry.Unregister(e("10.0.0.2", 0)),
	}
	got := registry.Coalesce(repeated)
	want := []registry.Op{registry.Register(e("10.0.0.1", 2)), registry.Unregister(e("10.0.0.2", 0)), registry.Register(e("10.0.0.3", 1))}
	if len(got) != len(want) {
		t.Fatalf("coalesced to %d ops, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || !endpoint.Equal(got[i].Endpoint, want[i].Endpoint) {
			t.Errorf("op %d = %v %+v, want %v %+v", i, got[i].Kind, got[i].Endpoint, want[i].Kind, want[i].Endpoint)
		}
	}
	if repeated[0].Endpoint.Weight != 1 {
		t.Error("Coalesce changed the caller's batch")
	}
}
