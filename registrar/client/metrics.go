package client

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	cacheAgeDesc = prometheus.NewDesc("agent_registrar_cache_age_seconds",
		"Time since the agent's registrar cache was last known current (0 while the watch stream is up and caught up).", nil, nil)
	reconnectsDesc = prometheus.NewDesc("agent_registrar_stream_reconnects_total",
		"Watch stream reconnection attempts.", nil, nil)
)

// Describe implements prometheus.Collector; the Front exports these series beside its
// own when it is registered with the agent's metrics registry.
func (c *driver) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheAgeDesc
	ch <- reconnectsDesc
}

// Collect implements prometheus.Collector.
func (c *driver) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(cacheAgeDesc, prometheus.GaugeValue, c.cache.age().Seconds())
	ch <- prometheus.MustNewConstMetric(reconnectsDesc, prometheus.CounterValue, float64(c.reconnects.Load()))
}

var _ prometheus.Collector = (*driver)(nil)
