package registry

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/metricset"
)

// Calls a Front counts, and how each ended.
const (
	opApply = iota
	opList
	opWatch
	numOps
)

var opNames = [numOps]string{"apply", "list", "watch"}

const (
	resultOK = iota
	resultInvalid
	resultClosed
	resultCanceled
	resultUnavailable
	resultNoWatch
	resultError
	numResults
)

var resultNames = [numResults]string{"ok", "invalid", "closed", "canceled", "unavailable", "no_watch", "error"}

// metrics are one Front's series. The children are resolved up front, so counting a
// call costs no label lookup and no allocation: a cached read stays free.
type metrics struct {
	callsVec  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	ends      *prometheus.CounterVec
	watches   prometheus.Gauge
	calls     [numOps][numResults]prometheus.Counter
	took      [numOps]prometheus.Observer
	driver    prometheus.Collector // the backend's own series, if it has any
}

func newMetrics(backend string, d Driver) *metrics {
	labels := prometheus.Labels{"backend": backend}
	m := &metrics{
		callsVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "registry_calls_total", Help: "Registry calls by operation and outcome.", ConstLabels: labels,
		}, []string{"op", "result"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "registry_call_duration_seconds", Help: "How long registry calls that reached the backend took (for watch: opening it); reads answered from a cache are counted, not timed.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"op"}),
		ends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "registry_watch_ends_total", Help: "Watches ended, by reason: context (the caller's), closed (the registry's Close), backend (the backend ended it).",
			ConstLabels: labels,
		}, []string{"reason"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "registry_watches", Help: "Watches open.", ConstLabels: labels,
		}),
	}
	for op := range numOps {
		for r := range numResults {
			m.calls[op][r] = m.callsVec.WithLabelValues(opNames[op], resultNames[r])
		}
		m.took[op] = m.durations.WithLabelValues(opNames[op])
	}
	m.driver, _ = d.(prometheus.Collector)
	return m
}

// observe counts and times one call that began at start and ended with *err.
func (m *metrics) observe(op int, start time.Time, err *error) {
	m.took[op].Observe(time.Since(start).Seconds())
	m.count(op, *err)
}

// count counts one call that ended with err.
func (m *metrics) count(op int, err error) { m.calls[op][outcome(err)].Inc() }

func (m *metrics) watchEnd(reason string) { m.ends.WithLabelValues(reason).Inc() }

func outcome(err error) int {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ErrClosed):
		return resultClosed
	case errors.Is(err, endpoint.ErrInvalid):
		return resultInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resultCanceled
	case errors.Is(err, ErrUnavailable):
		return resultUnavailable
	case errors.Is(err, ErrNoWatch):
		return resultNoWatch
	}
	return resultError
}

// collectors are the series a Front exports: its own, and the driver's if it has any.
func (m *metrics) collectors() metricset.Set {
	cs := metricset.Set{m.callsVec, m.durations, m.ends, m.watches}
	if m.driver != nil {
		cs = append(cs, m.driver)
	}
	return cs
}

// Describe implements prometheus.Collector: register a Front to export its series
// (registry_calls_total, registry_call_duration_seconds, registry_watches,
// registry_watch_ends_total, labelled with the backend's name) and the backend's own,
// if it has any.
func (f *Front) Describe(ch chan<- *prometheus.Desc) { f.m.collectors().Describe(ch) }

// Collect implements prometheus.Collector.
func (f *Front) Collect(ch chan<- prometheus.Metric) { f.m.collectors().Collect(ch) }

var _ prometheus.Collector = (*Front)(nil)
