package registry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// benchFleet is n endpoints in the order an etcd range returns them (by key, not
// by address), each with an annotation.
func benchFleet(n int) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, 0, n)
	for k := range n {
		i := k%(n/100)*100 + k/(n/100) // service by service, as a key range holds them
		eps = append(eps, endpoint.Endpoint{Cluster: "prod", Service: fmt.Sprintf("svc-%03d", i%100), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Priority: 1,
			Annotations: map[string]string{"version": "v1"}})
	}
	return eps
}

// listDriver answers every List with a fresh copy of eps, sorted when sorted is set
// (as a backend that sorts itself does), and streams events to every watch.
type listDriver struct {
	eps    []endpoint.Endpoint
	sorted bool
	events []registry.Event
}

func (d *listDriver) Apply(context.Context, []registry.Op) error { return nil }
func (d *listDriver) Close() error                               { return nil }

func (d *listDriver) List(context.Context, endpoint.Filter) ([]endpoint.Endpoint, error) {
	out := append([]endpoint.Endpoint(nil), d.eps...)
	if d.sorted {
		endpoint.Sort(out)
	}
	return out, nil
}

func (d *listDriver) Watch(ctx context.Context, _ endpoint.Filter) (<-chan registry.Event, error) {
	ch := make(chan registry.Event, 1024)
	go func() {
		defer close(ch)
		for _, ev := range d.events {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// BenchmarkFrontList10k is a List of 10,000 endpoints read in key order: the
// backend's read plus whatever sorting it takes to answer.
func BenchmarkFrontList10k(b *testing.B) {
	for _, sorted := range []bool{false, true} {
		b.Run(fmt.Sprintf("driverSorts=%v", sorted), func(b *testing.B) {
			f := registry.NewFront("bench", &listDriver{eps: benchFleet(10000), sorted: sorted})
			defer f.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				eps, err := f.List(ctx, endpoint.Filter{})
				if err != nil || len(eps) != 10000 {
					b.Fatal(len(eps), err)
				}
			}
		})
	}
}

// BenchmarkFrontWatch10k forwards a watch's initial 10,000 endpoints, Synced, and
// 10,000 updates through the front: the per-event cost of keeping a watch
// consistent.
func BenchmarkFrontWatch10k(b *testing.B) {
	eps := benchFleet(10000)
	var events []registry.Event
	for _, e := range eps {
		events = append(events, registry.Event{Type: registry.Added, Endpoint: e})
	}
	events = append(events, registry.Event{Type: registry.Synced})
	for _, e := range eps {
		e.Weight = 5
		events = append(events, registry.Event{Type: registry.Updated, Endpoint: e})
	}
	f := registry.NewFront("bench", &listDriver{events: events})
	defer f.Close()
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := f.Watch(ctx, endpoint.Filter{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for range ch {
			n++
			if n == len(events) {
				break
			}
		}
		cancel()
		for range ch {
		}
	}
}
