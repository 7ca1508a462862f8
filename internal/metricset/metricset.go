// Package metricset exports a fixed set of Prometheus collectors as one Collector,
// for a component that hands its caller one thing to register.
package metricset

import "github.com/prometheus/client_golang/prometheus"

// Set is a collection of collectors that describes and collects as one.
type Set []prometheus.Collector

// Describe implements prometheus.Collector.
func (s Set) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s Set) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s {
		c.Collect(ch)
	}
}

var _ prometheus.Collector = Set(nil)
