package xds

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
// priority, no address twice, no locality weight 0), weighs localities by their
// routable endpoints, and ranks endpoints by (priority, distance), the least
// preferred ranks sharing the last priority Envoy takes.
func TestRandomLocalitiesBuildValidLoadAssignments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	capped := 0
	for i := range 300 {
		// Mostly small registries with few priorities; every third a large one
		// with priorities up to 255, beyond the 129 xDS priorities Envoy takes.
		n, hosts, prios := 1+rng.IntN(30), 6, 4
		if i%3 == 0 {
			n, hosts, prios = 1+rng.IntN(600), 250, 255
		}
		var eps []endpoint.Endpoint
		for range n {
			e := mk(pick("a", "b"), "web", "grpc", fmt.Sprintf("10.0.%d.%d", rng.IntN(2), rng.IntN(hosts)),
				80+rng.IntN(2), 1+rng.IntN(prios), rng.IntN(65536))
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
		if l := cla.GetEndpoints(); l[len(l)-1].GetPriority() == maxPriority {
			capped++
		}
	}
	if capped < 10 {
		t.Errorf("only %d load assignments reached the priority cap", capped)
	}
}

// checkAsGRPC checks a load assignment as grpc-go's EDS parser does, and that each
// xDS priority stands for one (Switchboard priority, distance), in their order.
func checkAsGRPC(t *testing.T, cla *endpointv3.ClusterLoadAssignment, eps []endpoint.Endpoint, loc clientLocality) {
	t.Helper()
	// Of an address registered twice, the most routable copy is served; among
	// equals, the first by cluster.
	order := map[endpoint.Health]int{endpoint.Healthy: 0, endpoint.Draining: 1}
	better := func(a, b endpoint.Endpoint) bool {
		oa, ok := order[a.Health]
		if !ok {
			oa = 2
		}
		ob, ok := order[b.Health]
		if !ok {
			ob = 2
		}
		return oa < ob || oa == ob && a.Cluster < b.Cluster
	}
	byAddr := map[string]endpoint.Endpoint{}
	for _, e := range eps {
		if o, ok := byAddr[endpoint.HostPort(e.Address, e.Port)]; !ok || better(e, o) {
			byAddr[endpoint.HostPort(e.Address, e.Port)] = e
		}
	}
	seenLoc, seenAddr := map[string]bool{}, map[string]bool{}
	ranks := map[uint32]rank{} // the (first) rank each xDS priority stands for
	merged := map[rank]bool{}  // the ranks of the capped last priority
	for _, l := range cla.GetEndpoints() {
		id := fmt.Sprint(l.GetPriority(), l.GetLocality())
		if seenLoc[id] || l.GetLoadBalancingWeight().GetValue() == 0 {
			t.Fatalf("locality %s twice or with weight 0", id)
		}
		seenLoc[id] = true
		var routable uint64
		for _, lb := range l.GetLbEndpoints() {
			if lb.GetHealthStatus() == corev3.HealthStatus_HEALTHY {
				routable += uint64(lb.GetLoadBalancingWeight().GetValue())
			}
		}
		if want := uint32(max(min(routable, math.MaxUint32), 1)); l.GetLoadBalancingWeight().GetValue() != want {
			t.Fatalf("locality %s weighs %d, its routable endpoints %d", id, l.GetLoadBalancingWeight().GetValue(), want)
		}
		for _, lb := range l.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			a := endpoint.HostPort(sa.GetAddress(), int(sa.GetPortValue()))
			if seenAddr[a] {
				t.Fatalf("address %s twice", a)
			}
			seenAddr[a] = true
			e := byAddr[a]
			r := rank{e.Priority, loc.distance(e)}
			if l.GetPriority() > maxPriority {
				t.Fatalf("xDS priority %d: Envoy takes at most %d", l.GetPriority(), maxPriority)
			}
			if l.GetPriority() == maxPriority { // may hold the least preferred ranks
				merged[r] = true
				if o, ok := ranks[maxPriority]; !ok || r.priority < o.priority || r.priority == o.priority && r.distance < o.distance {
					ranks[maxPriority] = r
				}
				continue
			}
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
	present := map[rank]bool{}
	for _, e := range byAddr {
		present[rank{e.Priority, loc.distance(e)}] = true
	}
	if len(present) <= maxPriority+1 && len(merged) > 1 {
		t.Fatalf("%d ranks fit in %d priorities, yet priority %d holds %d", len(present), maxPriority+1, maxPriority, len(merged))
	}
	for r := range merged {
		if p := ranks[maxPriority-1]; r.priority < p.priority || r.priority == p.priority && r.distance <= p.distance {
			t.Fatalf("priority %d holds %v, preferred to priority %d's %v", maxPriority, r, maxPriority-1, p)
		}
	}
	if len(seenAddr) != len(byAddr) {
		t.Fatalf("%d addresses served, %d registered", len(seenAddr), len(byAddr))
	}
}

// TestLocalityWeightCountsRoutableEndpointsOnly: a locality weighs the sum of its
// healthy endpoints' weights, since grpc-go takes the weight as is and leaves the
// others out only inside the locality; one without a healthy endpoint weighs 1.
func TestLocalityWeightCountsRoutableEndpointsOnly(t *testing.T) {
	weighted := func(addr, zone string, h endpoint.Health, w int) endpoint.Endpoint {
		e := placed(addr, 1, "eu", zone, h)
		e.Weight = w
		return e
	}
	cla := loadAssignment(t, clientLocality{},
		weighted("10.0.0.1", "a", endpoint.Healthy, 5),
		weighted("10.0.0.2", "a", endpoint.Draining, 5),
		weighted("10.0.0.3", "a", endpoint.Draining, 5),
		weighted("10.0.0.4", "a", endpoint.Unhealthy, 5),
		weighted("10.0.0.5", "b", endpoint.Healthy, 5),
		weighted("10.0.0.6", "c", endpoint.Draining, 7),
		weighted("10.0.0.7", "c", endpoint.Unhealthy, 9),
		weighted("10.0.0.8", "d", endpoint.Healthy, 0), // no preference: 1
		weighted("10.0.0.9", "d", endpoint.Healthy, 2),
	)
	var got []string
	for _, l := range cla.GetEndpoints() {
		got = append(got, fmt.Sprintf("%s=%d", l.GetLocality().GetZone(), l.GetLoadBalancingWeight().GetValue()))
	}
	if want := []string{"a=5", "b=5", "c=1", "d=3"}; !slices.Equal(got, want) {
		t.Errorf("locality weights %q, want %q", got, want)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Error(err)
	}
}

// TestPrioritiesCappedForEnvoy: Envoy rejects a locality priority above 128. When
// there are more ranks than that, the least preferred share priority 128, and the
// others keep theirs; with a client locality (ranks are priority × distance) and
// without.
func TestPrioritiesCappedForEnvoy(t *testing.T) {
	// fleet has endpoints of priorities 1..n; those up to 44 in three zones.
	fleet := func(n int) []endpoint.Endpoint {
		var eps []endpoint.Endpoint
		for p := 1; p <= n; p++ {
			zones := [][2]string{{"eu", "a"}}
			if p <= 44 {
				zones = [][2]string{{"eu", "a"}, {"eu", "b"}, {"us", "c"}}
			}
			for _, z := range zones {
				i := len(eps) + 1
				eps = append(eps, placed(fmt.Sprintf("10.0.%d.%d", i/250, i%250), p, z[0], z[1], endpoint.Healthy))
			}
		}
		return eps
	}
	for _, c := range []struct {
		n    int
		locs []clientLocality // those whose ranks exceed the cap
	}{
		{44, []clientLocality{{"eu", "a"}, {"eu", "b"}}}, // 44 × 3 distances
		{200, []clientLocality{{}, {"eu", "a"}, {"us", "c"}}},
	} {
		eps := fleet(c.n)
		r, err := build(eps)
		if err != nil {
			t.Fatalf("build with %d priorities: %v", c.n, err)
		}
		for _, loc := range c.locs {
			list, err := r.forLocality(loc)
			if err != nil {
				t.Fatalf("%d priorities, client in %v: %v", c.n, loc, err)
			}
			cla := list[0].(*endpointv3.ClusterLoadAssignment)
			if err := cla.ValidateAll(); err != nil {
				t.Fatalf("%d priorities, client in %v: %v", c.n, loc, err)
			}
			checkAsGRPC(t, cla, eps, loc)
			// Every priority up to the cap is used, the first by the best rank.
			first := map[uint32]rank{}
			for _, l := range cla.GetEndpoints() {
				e := byAddress(eps, l.GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				if _, ok := first[l.GetPriority()]; !ok {
					first[l.GetPriority()] = rank{e.Priority, loc.distance(e)}
				}
			}
			if len(first) != maxPriority+1 || first[0] != (rank{1, 0}) {
				t.Errorf("%d priorities, client in %v: %d xDS priorities, the first %v; want %d, the first {1 0}",
					c.n, loc, len(first), first[0], maxPriority+1)
			}
		}
	}
}

func byAddress(eps []endpoint.Endpoint, addr string) endpoint.Endpoint {
	for _, e := range eps {
		if e.Address == addr {
			return e
		}
	}
	return endpoint.Endpoint{}
}

// TestDuplicateAddressKeepsTheMostRoutableCopy: of one address and port registered
// in several Switchboard clusters, EDS serves the healthy copy, else the draining
// one, as DNS does; among equals the first cluster by name, whatever the order.
func TestDuplicateAddressKeepsTheMostRoutableCopy(t *testing.T) {
	in := func(cluster string, h endpoint.Health) endpoint.Endpoint {
		e := mk(cluster, "web", "grpc", "10.0.0.1", 80, 1, 0)
		e.Health = h
		return e
	}
	for _, c := range []struct {
		eps  []endpoint.Endpoint
		want string
	}{
		{[]endpoint.Endpoint{in("a", endpoint.Draining), in("b", endpoint.Healthy)}, "0 //b: 10.0.0.1=HEALTHY"},
		{[]endpoint.Endpoint{in("a", endpoint.Unhealthy), in("b", endpoint.Draining)}, "0 //b: 10.0.0.1=DRAINING"},
		{[]endpoint.Endpoint{in("a", endpoint.Unhealthy), in("b", endpoint.Draining), in("c", endpoint.Healthy)}, "0 //c: 10.0.0.1=HEALTHY"},
		{[]endpoint.Endpoint{in("a", endpoint.Health(9)), in("b", endpoint.Unhealthy)}, "0 //a: 10.0.0.1=UNHEALTHY"},
		{[]endpoint.Endpoint{in("a", endpoint.Healthy), in("b", endpoint.Healthy)}, "0 //a: 10.0.0.1=HEALTHY"},
	} {
		for _, eps := range [][]endpoint.Endpoint{c.eps, reversed(c.eps)} {
			if got := summary(makeLoadAssignment("web|grpc", eps, clientLocality{})); !slices.Equal(got, []string{c.want}) {
				t.Errorf("%v: served %q, want %q", eps, got, c.want)
			}
		}
	}
}

func reversed(eps []endpoint.Endpoint) []endpoint.Endpoint {
	out := slices.Clone(eps)
	slices.Reverse(out)
	return out
}
