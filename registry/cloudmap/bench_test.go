package cloudmap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// BenchmarkListByService lists 10,000 endpoints of one service (100 ListInstances
// pages of 100, Cloud Map's maximum) from a namespace that also holds 1,000
// endpoints of another service, through the real SDK client and the fake over
// loopback HTTP. The numbers are dominated by HTTP, SigV4 and JSON, as with the
// real service minus the network round trips.
func BenchmarkListByService(b *testing.B) {
	fake := cloudmaptest.NewServer(cloudmaptest.Options{PendingPolls: -1})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := New(ctx, Options{Client: fake.NewClient(), Namespace: "bench", CreateNamespace: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	seed(ctx, b, r, "web", 10_000)
	seed(ctx, b, r, "db", 1_000)
	b.Logf("registered 11,000 endpoints in %s", time.Since(start).Round(time.Millisecond))

	for b.Loop() {
		eps, err := r.List(ctx, endpoint.Filter{Service: "web"})
		if err != nil {
			b.Fatal(err)
		}
		if len(eps) != 10_000 {
			b.Fatalf("List returned %d endpoints, want 10000", len(eps))
		}
	}
}

func seed(ctx context.Context, b *testing.B, r registry.Registry, service string, n int) {
	b.Helper()
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		ops := make([]registry.Op, 0, batch)
		for i := lo; i < min(lo+batch, n); i++ {
			e := endpoint.Endpoint{
				Cluster: fmt.Sprintf("cluster-%d", i%4), Service: service, Protocol: "http",
				Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 8080, Priority: 1,
				Node: fmt.Sprintf("node-%d", i%50), Annotations: map[string]string{"zone": "a"},
			}
			ops = append(ops, registry.Register(e))
		}
		if err := r.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}
