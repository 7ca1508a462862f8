package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// fleet returns n endpoints spread over 100 services.
func fleet(n int) []registry.Op {
	ops := make([]registry.Op, n)
	for i := range ops {
		ops[i] = registry.Register(endpoint.Endpoint{
			Cluster: "prod", Service: fmt.Sprintf("svc-%03d", i%100), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Priority: 1,
		})
	}
	return ops
}

func BenchmarkListByService10k(b *testing.B) {
	r := memory.New()
	defer r.Close()
	ctx := context.Background()
	if err := r.Apply(ctx, fleet(10000)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		eps, err := r.List(ctx, endpoint.Filter{Service: "svc-042"})
		if err != nil || len(eps) != 100 {
			b.Fatalf("List = %d, %v", len(eps), err)
		}
	}
}

func BenchmarkApply1000(b *testing.B) {
	ctx := context.Background()
	ops := fleet(1000)
	r := memory.New()
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchUpdates1000 times 1,000 updates in one batch reaching a watcher
// through the Front.
func BenchmarkWatchUpdates1000(b *testing.B) {
	r := memory.New()
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ops := fleet(1000)
	for i := range ops {
		ops[i].Endpoint.Annotations = map[string]string{"version": "v1"}
	}
	if err := r.Apply(ctx, ops); err != nil {
		b.Fatal(err)
	}
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		b.Fatal(err)
	}
	for ev := range ch {
		if ev.Type == registry.Synced {
			break
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range ops {
			ops[j].Endpoint.Weight = i + 1
		}
		if err := r.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
		for range ops {
			if ev := <-ch; ev.Type != registry.Updated {
				b.Fatalf("event %s", ev.Type)
			}
		}
	}
}
