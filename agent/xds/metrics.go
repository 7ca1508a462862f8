package xds

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/internal/metricset"
)

// metrics are the xDS server's series; the Server exports them as a Collector.
type metrics struct {
	metricset.Set // every series below, for the Server to export
	pushes        *prometheus.CounterVec
	nacks         *prometheus.CounterVec
	streams       prometheus.Gauge
	proxies       prometheus.Gauge
	resources     *prometheus.GaugeVec
	views         prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_xds_pushes_total",
			Help: "xDS responses sent, SotW and delta, by resource type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_xds_nacks_total",
			Help: "xDS responses a client rejected (NACK), by resource type."}, []string{"type"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_xds_streams",
			Help: "Open xDS streams."}),
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_xds_connected_proxies",
			Help: "Distinct xDS clients (node ids) with an open stream."}),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchboard_agent_xds_resources",
			Help: "Resources in the served snapshot, by type."}, []string{"type"}),
		views: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_xds_snapshots",
			Help: "Snapshots kept: one per client kind (Envoy, proxyless) and distinct client locality."}),
	}
	m.Set = metricset.Set{m.pushes, m.nacks, m.streams, m.proxies, m.resources, m.views}
	return m
}

func (m *metrics) setResources(r resources) {
	for _, t := range typeURLs {
		m.resources.WithLabelValues(shortType(t)).Set(float64(len(r.byType(t))))
	}
}

// shortType turns a type URL into a label value: "Cluster" for
// type.googleapis.com/envoy.config.cluster.v3.Cluster.
func shortType(typeURL string) string {
	for i := len(typeURL) - 1; i >= 0; i-- {
		if typeURL[i] == '.' {
			return typeURL[i+1:]
		}
	}
	return typeURL
}
