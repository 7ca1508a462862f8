package kubesync

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestImportLocalityAndHealth: a slice endpoint's zone becomes the entry's zone, and
// a terminating endpoint that still serves is imported as draining (it finishes its
// work, takes no new work) instead of vanishing at once; one that neither is ready
// nor serves is left out, as before.
func TestImportLocalityAndHealth(t *testing.T) {
	s := userSlice("api-1", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "http", port: 80}},
		sliceEP{addr: "10.1.0.1", ready: yes}, sliceEP{addr: "10.1.0.2", ready: no}, sliceEP{addr: "10.1.0.3", ready: no})
	s.Endpoints[0].Zone = ptr("eu-west-1a")
	s.Endpoints[1].Conditions.Serving, s.Endpoints[1].Conditions.Terminating = yes, yes
	s.Endpoints[2].Conditions.Serving, s.Endpoints[2].Conditions.Terminating = no, yes
	want, notes := planImport(self, ns, "api", 0, []*discoveryv1.EndpointSlice{s})
	if len(notes) != 0 {
		t.Fatalf("notes %v", notes)
	}
	got := map[string]endpoint.Endpoint{}
	for _, e := range want {
		got[e.Address] = e
	}
	if len(got) != 2 {
		t.Fatalf("imported %v, want 10.1.0.1 and 10.1.0.2", got)
	}
	if e := got["10.1.0.1"]; e.Zone != "eu-west-1a" || e.Health != endpoint.Healthy {
		t.Errorf("ready endpoint imported as zone %q health %v", e.Zone, e.Health)
	}
	if e := got["10.1.0.2"]; e.Health != endpoint.Draining {
		t.Errorf("terminating, serving endpoint imported as %v, want draining", e.Health)
	}
	// A zone the registry cannot hold is left out, not the endpoint.
	s.Endpoints[0].Zone = ptr("zone with spaces")
	want, _ = planImport(self, ns, "api", 0, []*discoveryv1.EndpointSlice{s})
	for _, e := range want {
		if e.Address == "10.1.0.1" && e.Zone != "" {
			t.Errorf("invalid zone imported: %q", e.Zone)
		}
	}
	if len(want) != 2 {
		t.Errorf("an invalid zone dropped the endpoint: %v", want)
	}
}

// TestExportLocalityAndHealth: an exported slice endpoint carries its zone, and its
// conditions say what kube-proxy needs: healthy is ready; draining is serving and
// terminating, not ready; unhealthy is neither. An address whose entries disagree
// takes the least routable of them.
func TestExportLocalityAndHealth(t *testing.T) {
	healthy := ep(other, "web", "http", "10.0.0.1", 8080)
	healthy.Zone = "eu-west-1b"
	draining := ep(other, "web", "http", "10.0.0.2", 8080)
	draining.Health = endpoint.Draining
	unhealthy := ep(other, "web", "http", "10.0.0.3", 8080)
	unhealthy.Health = endpoint.Unhealthy
	mixedA := ep(other, "web", "http", "10.0.0.4", 8080)
	mixedB := ep(other, "web", "grpc", "10.0.0.4", 9090)
	mixedB.Health = endpoint.Draining
	plan := planExport(ns, "web", []endpoint.Endpoint{healthy, draining, unhealthy, mixedA, mixedB})
	got := map[string]discoveryv1.Endpoint{}
	for _, s := range plan.slices {
		for _, e := range s.Endpoints {
			got[e.Addresses[0]] = e
		}
	}
	type cond struct{ ready, serving, terminating bool }
	read := func(c discoveryv1.EndpointConditions) cond {
		b := func(p *bool) bool { return p != nil && *p }
		return cond{b(c.Ready), b(c.Serving), b(c.Terminating)}
	}
	for addr, want := range map[string]cond{
		"10.0.0.1": {true, true, false},
		"10.0.0.2": {false, true, true},
		"10.0.0.3": {false, false, false},
		"10.0.0.4": {false, true, true},
	} {
		if c := read(got[addr].Conditions); c != want {
			t.Errorf("%s: conditions %+v, want %+v", addr, c, want)
		}
	}
	if z := got["10.0.0.1"].Zone; z == nil || *z != "eu-west-1b" {
		t.Errorf("zone %v, want eu-west-1b", z)
	}
	if z := got["10.0.0.2"].Zone; z != nil {
		t.Errorf("zone %q on an endpoint without one", *z)
	}
}
