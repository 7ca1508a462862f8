package endpoint

import (
	"fmt"
	"testing"
)

func BenchmarkInstanceID(b *testing.B) {
	k := valid().Key()
	b.ReportAllocs()
	for b.Loop() {
		_ = k.InstanceID()
	}
}

func BenchmarkSort10k(b *testing.B) {
	eps := make([]Endpoint, 10000)
	for i := range eps {
		eps[i] = valid()
		eps[i].Address = fmt.Sprintf("10.%d.%d.%d", i%7, (i*31)%256, (i*17)%256)
	}
	work := make([]Endpoint, len(eps))
	b.ReportAllocs()
	for b.Loop() {
		copy(work, eps)
		Sort(work)
	}
}

// BenchmarkIsSorted10k checks a sorted answer: what the Front pays for an answer a
// backend sorted itself (JetStream's, which sorts to keep one entry per key).
func BenchmarkIsSorted10k(b *testing.B) {
	eps := make([]Endpoint, 10000)
	for i := range eps {
		eps[i] = valid()
		eps[i].Address = fmt.Sprintf("10.%d.%d.%d", i%7, (i*31)%256, (i*17)%256)
	}
	Sort(eps)
	b.ReportAllocs()
	for b.Loop() {
		if !IsSorted(eps) {
			b.Fatal("not sorted")
		}
	}
}
