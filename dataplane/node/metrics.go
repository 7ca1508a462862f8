package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's Prometheus metrics. Counters are per link ("link" is the
// control-plane link id, "peer:{group}/{node}" for a peering in the group, "local" for
// local clients); queue depth and link state are read from the live conns when
// scraped, so a deleted link leaves no stale gauge behind.
type metrics struct {
	in, out, drop *prometheus.CounterVec
	connectFails  *prometheus.CounterVec
	// identityDenied counts dialers refused for who they are (identity.go).
	identityDenied *prometheus.CounterVec
	published      prometheus.Counter
	forwarded      prometheus.Counter
	unroutable     prometheus.Counter
	delivered      prometheus.Counter
	// slowConsumers counts local subscribers cut off for not keeping up.
	slowConsumers prometheus.Counter
	// requests counts requests made at this node by outcome (answered, no_responders,
	// timeout, refused).
	requests *prometheus.CounterVec
	local    *connMetrics
}

// connMetrics are one link's counters, resolved once.
type connMetrics struct {
	in, out prometheus.Counter
	label   string
	drop    *prometheus.CounterVec
}

func (m *connMetrics) dropped(reason string) prometheus.Counter {
	return m.drop.WithLabelValues(m.label, reason)
}

func newMetrics(reg *prometheus.Registry, n *Node) *metrics {
	const ns = "switchboard_node_"
	m := &metrics{
		in: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "messages_in_total",
			Help: "Messages received per link."}, []string{"link"}),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "messages_out_total",
			Help: "Messages sent per link."}, []string{"link"}),
		drop: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "messages_dropped_total",
			Help: "Message copies dropped, per link and reason (queue_full, link_broken, link_closed, unacked, unsubscribed, slow_consumer, hop_limit, no_route, malformed, bad_origin, no_request)."}, []string{"link", "reason"}),
		connectFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "link_connect_failures_total",
			Help: "Attempts to open a link's or peering's stream that failed (refused, TLS handshake, ...); the log has the reason."}, []string{"link"}),
		identityDenied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "peer_identity_denied_total",
			Help: "Link and peering streams refused for who the dialer is, per reason (no_identity, metadata_mismatch, link_assignment); the log has the identity."}, []string{"reason"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "published_total",
			Help: "Messages local clients published."}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "forwarded_total",
			Help: "Message copies handed to a link, a peer or a local subscriber."}),
		unroutable: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "unroutable_total",
			Help: "Messages published locally that no reachable node subscribes to."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "delivered_total",
			Help: "Messages sent to local subscribers."}),
		slowConsumers: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "slow_consumers_total",
			Help: "Local subscribers cut off because their queue (subscriber_queue_len) was full: they did not keep up. What was meant for them is counted in messages_dropped_total as slow_consumer."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "requests_total",
			Help: "Requests local clients made at this node, per outcome (answered, no_responders, timeout, refused)."}, []string{"outcome"}),
	}
	m.local = m.forConn("local")
	reg.MustRegister(m.in, m.out, m.drop, m.connectFails, m.identityDenied, m.published, m.forwarded, m.unroutable, m.delivered, m.slowConsumers, m.requests, stateCollector{n})
	return m
}

func (m *metrics) forConn(label string) *connMetrics {
	return &connMetrics{in: m.in.WithLabelValues(label), out: m.out.WithLabelValues(label), label: label, drop: m.drop}
}

func (m *metrics) dropped(reason string) prometheus.Counter { return m.local.dropped(reason) }

var (
	queueDesc = prometheus.NewDesc("switchboard_node_queue_depth", "Messages waiting in a link's outgoing queue.", []string{"link", "direction"}, nil)
	upDesc    = prometheus.NewDesc("switchboard_node_link_up", "1 while a link's stream is connected, 0 while it reconnects.", []string{"link", "direction"}, nil)
	subsDesc  = prometheus.NewDesc("switchboard_node_local_subscriptions", "Local clients' subscriptions.", nil, nil)
)

// stateCollector reads queue depths and link states from the node at scrape time.
type stateCollector struct{ n *Node }

func (s stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDesc
	ch <- upDesc
	ch <- subsDesc
}

func (s stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s.n.allConns() {
		label := c.label()
		dir := "out"
		if c.kind == linkIn || c.kind == peerIn {
			dir = "in"
		}
		up := 0.0
		if c.isUp() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(len(c.msgs)), label, dir)
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, label, dir)
	}
	ch <- prometheus.MustNewConstMetric(subsDesc, prometheus.GaugeValue, float64(s.n.localSubCount()))
}
