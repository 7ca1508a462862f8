package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// TestObserveCountsRejectedTransitions: a sync that failed because the store refused
// a status change is counted under a kind of its own.
func TestObserveCountsRejectedTransitions(t *testing.T) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d"}, []string{"queue"}),
		errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "e"}, []string{"queue", "kind"}),
	}
	obs := m.observe("route")
	obs("cloud/n1", 0, fmt.Errorf("route 3: failed -> applied: %w", store.ErrInvalidTransition))
	obs("cloud/n1", 0, errors.Join(errors.New("subscribe failed"), fmt.Errorf("%w", store.ErrInvalidTransition)))
	obs("cloud/n1", 0, fmt.Errorf("%w: raced", reconcile.ErrRetrySoon))
	obs("cloud/n1", 0, errors.New("node gone"))
	for kind, want := range map[string]float64{"rejected_transition": 2, "retry": 1, "error": 1} {
		var got dto.Metric
		if err := m.errors.WithLabelValues("route", kind).Write(&got); err != nil {
			t.Fatal(err)
		}
		if got.GetCounter().GetValue() != want {
			t.Errorf("kind %s counted %v, want %v", kind, got.GetCounter().GetValue(), want)
		}
	}
}
