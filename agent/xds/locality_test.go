package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// placed is mk with a region, a zone and a health state.
func placed(addr string, priority int, region, zone string, h endpoint.Health) endpoint.Endpoint {
	e := mk("prod", "web", "grpc", addr, 80, priority, 0)
	e.Region, e.Zone, e.Health = region, zone, h
	return e
}

// summary renders a load assignment as "priority region/zone/sub-zone: address=STATUS …"
// per locality, in order.
func summary(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		loc := l.GetLocality()
		s := fmt.Sprintf("%d %s/%s/%s:", l.GetPriority(), loc.GetRegion(), loc.GetZone(), loc.GetSubZone())
		for _, e := range l.GetLbEndpoints() {
			s += fmt.Sprintf(" %s=%s", e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(), e.GetHealthStatus())
		}
		out = append(out, s)
	}
	return out
}

func loadAssignment(t *testing.T, loc clientLocality, eps ...endpoint.Endpoint) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	r := mustBuild(t, eps...)
	list, err := r.forLocality(loc)
	if err != nil {
		t.Fatal(err)
	}
	return list[0].(*endpointv3.ClusterLoadAssignment)
}

// TestLocalitiesAndHealth: localities carry the endpoints' region and zone (the
// Switchboard cluster as sub-zone), and every health state stays in EDS with its
// status.
func TestLocalitiesAndHealth(t *testing.T) {
	cla := loadAssignment(t, clientLocality{},
		placed("10.0.0.1", 1, "eu", "eu-a", endpoint.Healthy),
		placed("10.0.0.2", 1, "eu", "eu-a", endpoint.Draining),
		placed("10.0.0.3", 1, "eu", "eu-b", endpoint.Unhealthy),
		placed("10.0.0.4", 1, "", "", endpoint.Healthy),
		placed("10.0.0.5", 1, "us", "us-a", endpoint.Health(7)), // unknown: unhealthy
	)
	want := []string{
		"0 //prod: 10.0.0.4=HEALTHY",
		"0 eu/eu-a/prod: 10.0.0.1=HEALTHY 10.0.0.2=DRAINING",
		"0 eu/eu-b/prod: 10.0.0.3=UNHEALTHY",
		"0 us/us-a/prod: 10.0.0.5=UNHEALTHY",
	}
	if got := summary(cla); !slices.Equal(got, want) {
		t.Errorf("load assignment\n got %q\nwant %q", got, want)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Error(err)
	}
}

// TestZoneAwarePriorities: for a client that gave its locality, the xDS priority
// follows (Switchboard priority, distance): its zone, then its region, then the
// rest, dense from 0; without one, the Switchboard priorities alone, as before.
func TestZoneAwarePriorities(t *testing.T) {
	eps := []endpoint.Endpoint{
		placed("10.0.0.1", 1, "eu", "eu-a", endpoint.Healthy),
		placed("10.0.0.2", 1, "eu", "eu-b", endpoint.Healthy),
		placed("10.0.0.3", 1, "us", "eu-a", endpoint.Healthy), // a zone of the same name elsewhere
		placed("10.0.0.4", 1, "", "", endpoint.Healthy),
		placed("10.0.0.5", 2, "eu", "eu-a", endpoint.Healthy),
		placed("10.0.0.6", 2, "us", "us-a", endpoint.Healthy),
	}
	for _, c := range []struct {
		loc  clientLocality
		want []string
	}{
		{clientLocality{}, []string{
			"0 //prod: 10.0.0.4=HEALTHY",
			"0 eu/eu-a/prod: 10.0.0.1=HEALTHY",
			"0 eu/eu-b/prod: 10.0.0.2=HEALTHY",
			"0 us/eu-a/prod: 10.0.0.3=HEALTHY",
			"1 eu/eu-a/prod: 10.0.0.5=HEALTHY",
			"1 us/us-a/prod: 10.0.0.6=HEALTHY",
		}},
		{clientLocality{"eu", "eu-a"}, []string{
			"0 eu/eu-a/prod: 10.0.0.1=HEALTHY",
			"1 eu/eu-b/prod: 10.0.0.2=HEALTHY",
			"2 //prod: 10.0.0.4=HEALTHY",
			"2 us/eu-a/prod: 10.0.0.3=HEALTHY",
			"3 eu/eu-a/prod: 10.0.0.5=HEALTHY", // priority 2 in the client's zone: after every priority-1 endpoint
			"4 us/us-a/prod: 10.0.0.6=HEALTHY",
		}},
		{clientLocality{"eu", ""}, []string{ // a region only: no zone is the client's
			"0 eu/eu-a/prod: 10.0.0.1=HEALTHY",
			"0 eu/eu-b/prod: 10.0.0.2=HEALTHY",
			"1 //prod: 10.0.0.4=HEALTHY",
			"1 us/eu-a/prod: 10.0.0.3=HEALTHY",
			"2 eu/eu-a/prod: 10.0.0.5=HEALTHY",
			"3 us/us-a/prod: 10.0.0.6=HEALTHY",
		}},
		{clientLocality{"ap", "ap-a"}, []string{ // nothing near: as without a locality
			"0 //prod: 10.0.0.4=HEALTHY",
			"0 eu/eu-a/prod: 10.0.0.1=HEALTHY",
			"0 eu/eu-b/prod: 10.0.0.2=HEALTHY",
			"0 us/eu-a/prod: 10.0.0.3=HEALTHY",
			"1 eu/eu-a/prod: 10.0.0.5=HEALTHY",
			"1 us/us-a/prod: 10.0.0.6=HEALTHY",
		}},
	} {
		if got := summary(loadAssignment(t, c.loc, eps...)); !slices.Equal(got, c.want) {
			t.Errorf("client in %q/%q\n got %q\nwant %q", c.loc.region, c.loc.zone, got, c.want)
		}
	}
}

// TestWithoutClientLocalityTheLoadAssignmentsAreBuilds: a client without a locality
// gets the very resources build made, not a copy.
func TestWithoutClientLocalityTheLoadAssignmentsAreBuilds(t *testing.T) {
	r := mustBuild(t, placed("10.0.0.1", 1, "eu", "eu-a", endpoint.Healthy))
	list, err := r.forLocality(clientLocality{})
	if err != nil || len(list) != 1 || list[0] != r.endpoints[0] {
		t.Errorf("forLocality(none) = %v, %v; want build's load assignments", list, err)
	}
}

// TestDuplicateAddressLeavesNoPriorityGap: an address served once, from its first
// cluster, does not count the priority of its left-out copy, which would leave a
// priority without localities (xDS clients reject the gap).
func TestDuplicateAddressLeavesNoPriorityGap(t *testing.T) {
	cla := loadAssignment(t, clientLocality{},
		mk("a", "web", "grpc", "10.0.0.1", 80, 1, 0),
		mk("b", "web", "grpc", "10.0.0.1", 80, 2, 0),
		mk("a", "web", "grpc", "10.0.0.2", 80, 3, 0),
	)
	if got, want := summary(cla), []string{"0 //a: 10.0.0.1=HEALTHY", "1 //a: 10.0.0.2=HEALTHY"}; !slices.Equal(got, want) {
		t.Errorf("load assignment\n got %q\nwant %q", got, want)
	}
}

// TestRandomLocalitiesBuildValidLoadAssignments builds load assignments for random
// registries and client localities: each passes go-control-plane's validation and
// what grpc-go checks besides (priorities dense from 0, no locality twice at one
// priority, no address twice, no locality weight 0), and ranks endpoints by
// (priority, distance).
func TestRandomLocalitiesBuildValidLoadAssignments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	for range 300 {
		var eps []endpoint.Endpoint
		for range 1 + rng.IntN(30) {
			e := mk(pick("a", "b"), "web", "grpc", fmt.Sprintf("10.0.%d.%d", rng.IntN(2), rng.IntN(6)),
				80+rng.IntN(2), 1+rng.IntN(4), rng.IntN(65536))
			e.Region, e.Zone = pick("", "eu", "us"), pick("", "z1", "z2")
			e.Health = endpoint.Health(rng.IntN(4))
			eps = append(eps, e)
		}
		eps = dedupe(eps)
		loc := clientLocality{pick("", "eu", "us"), pick("", "z1", "z2")}
		cla := loadAssignment(t, loc, eps...)
		if err := cla.ValidateAll(); err != nil {
			t.Fatalf("client %v: %v", loc, err)
		}
		checkAsGRPC(t, cla, eps, loc)
	}
}

// checkAsGRPC checks a load assignment as grpc-go's EDS parser does, and that each
// xDS priority stands for one (Switchboard priority, distance), in their order.
func checkAsGRPC(t *testing.T, cla *endpointv3.ClusterLoadAssignment, eps []endpoint.Endpoint, loc clientLocality) {
	t.Helper()
	byAddr := map[string]endpoint.Endpoint{}
	for _, e := range eps {
		if _, ok := byAddr[endpoint.HostPort(e.Address, e.Port)]; !ok {
			byAddr[endpoint.HostPort(e.Address, e.Port)] = e
		}
	}
	seenLoc, seenAddr := map[string]bool{}, map[string]bool{}
	ranks := map[uint32]rank{} // the rank each xDS priority stands for
	for _, l := range cla.GetEndpoints() {
		id := fmt.Sprint(l.GetPriority(), l.GetLocality())
		if seenLoc[id] || l.GetLoadBalancingWeight().GetValue() == 0 {
			t.Fatalf("locality %s twice or with weight 0", id)
		}
		seenLoc[id] = true
		for _, lb := range l.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			a := endpoint.HostPort(sa.GetAddress(), int(sa.GetPortValue()))
			if seenAddr[a] {
				t.Fatalf("address %s twice", a)
			}
			seenAddr[a] = true
			e := byAddr[a]
			r := rank{e.Priority, loc.distance(e)}
			if o, ok := ranks[l.GetPriority()]; ok && o != r {
				t.Fatalf("xDS priority %d holds ranks %v and %v", l.GetPriority(), o, r)
			}
			ranks[l.GetPriority()] = r
		}
	}
	for p := range uint32(len(ranks)) {
		r, ok := ranks[p]
		if !ok {
			t.Fatalf("priorities %v have a gap at %d", ranks, p)
		}
		if n, ok := ranks[p+1]; ok && (n.priority < r.priority || n.priority == r.priority && n.distance <= r.distance) {
			t.Fatalf("xDS priority %d is %v, %d is %v: out of order", p, r, p+1, n)
		}
	}
	if len(seenAddr) != len(byAddr) {
		t.Fatalf("%d addresses served, %d registered", len(seenAddr), len(byAddr))
	}
}
