package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const ns = "switchboard_controlplane"

// metrics are the control plane's series, on a registry passed in (never the global
// one).
type metrics struct {
	reg           *prometheus.Registry
	duration      *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	registrations *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	if reg == nil {
		// The runtime's own series (heap, GC, goroutines, file descriptors) come with
		// a registry the server makes, as the registrar's and the agent's do.
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		reg: reg,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "reconcile_duration_seconds", Help: "Time one reconcile of one node took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"queue"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "reconcile_errors_total", Help: "Reconciles that failed, by queue and kind (retry: requeued without consuming a retry; rejected_transition: the store refused a status change).",
		}, []string{"queue", "kind"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "registrations_total", Help: "Registration handshakes by outcome (accepted, denied, refused: the node id is held by a live session of another identity, invalid, timeout).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.duration, m.errors, m.registrations,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "nodes_connected", Help: "Nodes with an open control stream.",
		}, func() float64 { return float64(len(s.streams.Nodes())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "queue_depth", Help: "Nodes waiting in a reconcile queue.", ConstLabels: prometheus.Labels{"queue": "link"},
		}, func() float64 { return float64(s.links.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "queue_depth", Help: "Nodes waiting in a reconcile queue.", ConstLabels: prometheus.Labels{"queue": "route"},
		}, func() float64 { return float64(s.routes.Len()) }),
		&stateCollector{st: s.store},
	)
	return m
}

// observe is a queue's OnResult.
func (m *metrics) observe(queue string) func(string, time.Duration, error) {
	return func(_ string, took time.Duration, err error) {
		m.duration.WithLabelValues(queue).Observe(took.Seconds())
		switch {
		case err == nil:
		case errors.Is(err, store.ErrInvalidTransition):
			// A reconciler decided from a wrong idea of a record's state: worth an
			// alert of its own rather than blending into node failures.
			m.errors.WithLabelValues(queue, "rejected_transition").Inc()
		case errors.Is(err, reconcile.ErrRetrySoon):
			m.errors.WithLabelValues(queue, "retry").Inc()
		default:
			m.errors.WithLabelValues(queue, "error").Inc()
		}
	}
}

func (m *metrics) registration(outcome string) { m.registrations.WithLabelValues(outcome).Inc() }

// stateCollector counts links and routes by status from the store at scrape time, so
// the numbers can never drift from the records.
type stateCollector struct {
	st store.Store
}

var (
	linksDesc     = prometheus.NewDesc(ns+"_links", "Links by status (deleted: waiting for the hard delete).", []string{"status"}, nil)
	routesDesc    = prometheus.NewDesc(ns+"_routes", "Route expansions by status (deleted: waiting for the hard delete).", []string{"status"}, nil)
	templatesDesc = prometheus.NewDesc(ns+"_wildcard_routes", "Wildcard route templates (announcements).", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- linksDesc
	ch <- routesDesc
	ch <- templatesDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if links, err := c.st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted}); err == nil {
		counts := map[string]int{}
		for _, st := range []store.LinkStatus{store.LinkPending, store.LinkConnecting, store.LinkApplied, store.LinkFailed, store.LinkDeleted} {
			counts[st.String()] = 0
		}
		for _, l := range links {
			counts[l.Status.String()]++
		}
		emit(ch, linksDesc, counts)
	}
	routes, err := c.st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return
	}
	counts := map[string]int{}
	for _, st := range []store.RouteStatus{store.RoutePending, store.RouteApplied, store.RouteFailed, store.RouteDeleted} {
		counts[st.String()] = 0
	}
	templates := 0
	for _, r := range routes {
		if r.IsTemplate() {
			templates++
			continue
		}
		counts[r.Status.String()]++
	}
	emit(ch, routesDesc, counts)
	ch <- prometheus.MustNewConstMetric(templatesDesc, prometheus.GaugeValue, float64(templates))
}

func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, counts map[string]int) {
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), status)
	}
}
