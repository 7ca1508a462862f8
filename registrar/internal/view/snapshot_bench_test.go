package view

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

// loadedState is a view holding n endpoints, read from the backend, with its
// full snapshot built.
func loadedState(tb testing.TB, n int) *View {
	tb.Helper()
	s := New(sendForm(Config{Epoch: 1, History: 64, MaxQueue: 1 << 20}))
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = fleetEndpoint(i)
	}
	s.EndFull(s.BeginFull(), eps)
	s.Snapshot()
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
		if _, err := s.Accept([]registry.Op{registry.Register(changed)}, nil, nil); err != nil {
			b.Fatal(err)
		}
		s.Snapshot()
	}
	b.ReportMetric(float64(s.Snapshot().Len()), "msgs")
}

// The full snapshot built from scratch at 100,000 endpoints, as before READY.
func BenchmarkSnapshotFull(b *testing.B) {
	s := loadedState(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		forgetSnapshot(s)
		s.Snapshot()
	}
	b.ReportMetric(float64(s.Snapshot().Len()), "msgs")
}
