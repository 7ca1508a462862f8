package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// openBench opens a registry on the benchmark server (fsync on, so write latency
// is what a real etcd disk gives).
func openBench(b *testing.B) reg {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, Options{Endpoints: benchServer(b).Endpoints(), Prefix: uniquePrefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return reg{Front: r, driver: r.Driver().(*driver)}
}

// BenchmarkApply1000 writes 1,000 registrations as one batched Apply (8 Txns of
// 128) and as 1,000 single-op Applies; the ratio of the two is the gain from
// batching. One iteration is 1,000 endpoints either way.
func BenchmarkApply1000(b *testing.B) {
	ops := registers(1000)
	for i := range ops {
		ops[i].Endpoint.TTL = endpoint.TTL(time.Minute)
	}
	ctx := context.Background()
	b.Run("batched", func(b *testing.B) {
		r := openBench(b)
		for b.Loop() {
			if err := r.Apply(ctx, ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(ops)*b.N)/b.Elapsed().Seconds(), "endpoints/s")
	})
	b.Run("single", func(b *testing.B) {
		r := openBench(b)
		for b.Loop() {
			for _, op := range ops {
				if err := r.Apply(ctx, []registry.Op{op}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(ops)*b.N)/b.Elapsed().Seconds(), "endpoints/s")
	})
}

// BenchmarkList10k lists from 10,000 endpoints (20 services × 5 clusters × 100
// addresses): by service (a prefix range of 500 keys), by cluster (the whole prefix
// read and filtered in the client, 2,000 returned) and everything.
func BenchmarkList10k(b *testing.B) {
	r := openBench(b)
	ctx := context.Background()
	var ops []registry.Op
	for s := range 20 {
		for c := range 5 {
			for a := range 100 {
				ops = append(ops, registry.Register(ep(fmt.Sprintf("c%d", c), fmt.Sprintf("svc%d", s), "http", fmt.Sprintf("10.%d.%d.%d", s, c, a), 8080)))
			}
		}
	}
	if err := r.Apply(ctx, ops); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    endpoint.Filter
		want int
	}{
		{"by-service", endpoint.Filter{Service: "svc7"}, 500},
		{"by-cluster", endpoint.Filter{Cluster: "c3"}, 2000},
		{"all", endpoint.Filter{}, 10000},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				got, err := r.List(ctx, c.f)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) != c.want {
					b.Fatalf("List = %d endpoints, want %d", len(got), c.want)
				}
			}
		})
	}
}
