package metricset

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSetRegistersAsOne(t *testing.T) {
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "b", Help: "b"})
	a.Add(2)
	b.Set(3)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Set{a, b})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 2 {
		t.Fatalf("gathered %d series (%v), want both collectors' 2", n, err)
	}
}
