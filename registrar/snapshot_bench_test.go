package registrar

import (
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// fleetEndpoint is endpoint i of a benchmark fleet: 500 services, distinct addresses.
func fleetEndpoint(i int) endpoint.Endpoint {
	return ep("east", fmt.Sprintf("svc%d", i%500), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), 8080)
}

// loadedState is a state holding n endpoints, read from the backend, with its
// full snapshot built.
func loadedState(tb testing.TB, n int) *state {
	tb.Helper()
	s := newState(1, 64, 1<<20, newMetrics(nil))
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = fleetEndpoint(i)
	}
	s.endFull(s.beginFull(), eps)
	s.snapshot()
	return s
}

// The full snapshot after one registration at 100,000 endpoints: what a new
// watcher waits for after a change.
func BenchmarkSnapshotAfterChange(b *testing.B) {
	s := loadedState(b, 100_000)
	changed := fleetEndpoint(12345)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		changed.Weight = i % 2
		if _, err := s.accept([]registry.Op{registry.Register(changed)}, nil); err != nil {
			b.Fatal(err)
		}
		s.snapshot()
	}
	b.ReportMetric(float64(len(s.snapshot().chunks)), "msgs")
}

// The full snapshot built from scratch at 100,000 endpoints, as before READY.
func BenchmarkSnapshotFull(b *testing.B) {
	s := loadedState(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		forgetSnapshot(s)
		s.snapshot()
	}
	b.ReportMetric(float64(len(s.snapshot().chunks)), "msgs")
}
