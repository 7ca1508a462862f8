package cloudmap

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestPaging lists through a fake whose pages hold three items: instances and
// services (whose pages are filtered after reading, so some come back empty) must
// be followed to the end.
func TestPaging(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{PageSize: 3}, Options{})
	var web []endpoint.Endpoint
	var ops []registry.Op
	for i := range 20 {
		e := ep([]string{"east", "west"}[i%2], "web", "http", fmt.Sprintf("10.0.%d.%d", i%3, i), 8080)
		web = append(web, e)
		ops = append(ops, registry.Register(e))
	}
	var others []endpoint.Endpoint
	for i := range 7 {
		e := ep("east", fmt.Sprintf("svc%d", i), "tcp", fmt.Sprintf("10.1.0.%d", i), 9000)
		others = append(others, e)
		ops = append(ops, registry.Register(e))
	}
	f.apply(ops...)
	endpoint.Sort(web)

	before := f.fake.Calls("ListInstances")
	got := f.list(endpoint.Filter{Service: "web"})
	if !slices.Equal(keyStrings(got), keyStrings(web)) {
		t.Fatalf("List(web) through 3-item pages = %v\nwant %v", keyStrings(got), keyStrings(web))
	}
	if calls := f.fake.Calls("ListInstances") - before; calls != 7 {
		t.Fatalf("List(web) made %d ListInstances calls, want 7 pages of 20 instances", calls)
	}

	all := slices.Concat(web, others)
	endpoint.Sort(all)
	before = f.fake.Calls("ListServices")
	if got := f.list(endpoint.Filter{}); !slices.Equal(keyStrings(got), keyStrings(all)) {
		t.Fatalf("List() = %d endpoints, want %d", len(got), len(all))
	}
	if calls := f.fake.Calls("ListServices") - before; calls < 3 {
		t.Fatalf("List() made %d ListServices calls; 8 services in pages of 3 need 3", calls)
	}
	west := f.list(endpoint.Filter{Cluster: "west", Service: "web", Protocol: "http"})
	if len(west) != 10 {
		t.Fatalf("List(west/web/http) = %d endpoints, want 10", len(west))
	}
	if got := f.list(endpoint.Filter{Address: "10.1.0.3"}); len(got) != 1 || got[0].Service != "svc3" {
		t.Fatalf("List(address 10.1.0.3) = %v", keyStrings(got))
	}
}

// TestServiceMapping checks that one Cloud Map service holds a service name across
// clusters and protocols, and that names Cloud Map would refuse are mapped.
func TestServiceMapping(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	long := "s" + strings.Repeat("x", 80)
	eps := []endpoint.Endpoint{
		ep("east", "web", "http", "10.0.0.1", 80),
		ep("west", "web", "grpc", "10.0.0.2", 9090),
		ep("east", "edge-", "http", "10.0.0.3", 80),
		ep("east", long, "http", "10.0.0.4", 80),
		ep("east", "Web", "http", "10.0.0.5", 80),
	}
	var ops []registry.Op
	for _, e := range eps {
		ops = append(ops, registry.Register(e))
	}
	f.apply(ops...)
	want := []string{"Web", serviceName("edge-"), serviceName(long), "web"}
	slices.Sort(want)
	if got := f.fake.ServiceNames(f.reg.NamespaceID()); !slices.Equal(got, want) {
		t.Fatalf("Cloud Map services = %v, want %v", got, want)
	}
	for _, name := range []string{"web", "Web", "edge-", long} {
		got := f.list(endpoint.Filter{Service: name})
		for _, e := range got {
			if e.Service != name {
				t.Fatalf("List(service %s) returned %s", name, e.Key())
			}
		}
		if want := map[string]int{"web": 2}[name]; len(got) != max(want, 1) {
			t.Fatalf("List(service %s) = %v", name, keyStrings(got))
		}
	}
	if got := f.list(endpoint.Filter{Service: "absent"}); len(got) != 0 {
		t.Fatalf("List(absent service) = %v", keyStrings(got))
	}
}

// TestForeignInstancesSkipped registers instances another tool could have written
// into the same service; List must ignore them, not fail.
func TestForeignInstancesSkipped(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{PendingPolls: -1}, Options{})
	mine := ep("prod", "web", "http", "10.0.0.1", 80)
	f.apply(registry.Register(mine))
	svcID, _, err := f.reg.serviceID(f.ctx, "web", false)
	if err != nil {
		t.Fatal(err)
	}
	client := f.fake.NewClient()
	foreign := map[string]map[string]string{
		"i-plain":    {"AWS_INSTANCE_IPV4": "10.0.0.9", "AWS_INSTANCE_PORT": "80"},
		"wrong-id":   mustEncode(t, ep("prod", "web", "http", "10.0.0.8", 80)),
		"bad-number": {"AWS_INSTANCE_IPV4": "10.0.0.7", "cluster": "prod", "service": "web", "protocol": "http", "priority": "high"},
	}
	for id, attrs := range foreign {
		out, err := client.RegisterInstance(f.ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(id), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		// The fake applies a registration when its operation is polled.
		if _, err := f.reg.await(f.ctx, aws.ToString(out.OperationId)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.fake.InstanceCount(); n != 4 {
		t.Fatalf("fake holds %d instances, want 4", n)
	}
	if got := keyStrings(f.list(endpoint.Filter{})); !slices.Equal(got, []string{mine.Key().String()}) {
		t.Fatalf("List with foreign instances present = %v, want only %s", got, mine.Key())
	}
}

func mustEncode(t *testing.T, e endpoint.Endpoint) map[string]string {
	t.Helper()
	a, err := encode(e, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return a
}
