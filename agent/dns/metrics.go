package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/internal/metricset"
)

// metrics are the DNS server's series; the Server exports them as a Collector.
type metrics struct {
	metricset.Set // every series below, for the Server to export
	queries       *prometheus.CounterVec
	truncated     prometheus.Counter
	forwarded     *prometheus.CounterVec
	names         prometheus.Gauge
	leftOut       prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_dns_queries_total",
			Help: "DNS queries answered, by transport (udp, tcp) and response code."}, []string{"proto", "rcode"}),
		truncated: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchboard_agent_dns_truncated_total",
			Help: "UDP answers truncated (TC set): the client retries over TCP."}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_dns_forwarded_total",
			Help: "Questions outside the domain sent to the upstream resolver, by result (ok, error)."}, []string{"result"}),
		names: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_dns_names",
			Help: "Names in the served zone."}),
		leftOut: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_dns_endpoints_left_out",
			Help: "Endpoints some of whose names the zone leaves out: a service, cluster or protocol name longer than a DNS label (63 bytes), or a name longer than 255."}),
	}
	m.Set = metricset.Set{m.queries, m.truncated, m.forwarded, m.names, m.leftOut}
	return m
}
