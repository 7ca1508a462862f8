package registrar

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
)

// metrics are the series of docs/registrar.md, "Observability", plus a few
// that say why: batch outcomes and watcher resyncs.
type metrics struct {
	connected    prometheus.Gauge
	endpoints    *prometheus.GaugeVec
	syncDuration prometheus.Histogram
	syncErrors   prometheus.Counter
	feedLive     prometheus.Gauge
	batchSize    prometheus.Histogram
	queue        prometheus.Gauge
	broadcast    [registrarv1.EndpointEvent_PROGRESS + 1]prometheus.Counter
	batches      *prometheus.CounterVec
	resyncs      prometheus.Counter
	denied       *prometheus.CounterVec
	// livenessExpired, livenessRestored and livenessRefreshed are registered with
	// the held entries' gauges (liveness_loop.go).
	livenessExpired, livenessRestored, livenessRefreshed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "registrar_connected_agents", Help: "Number of agents with an active watch stream.",
		}),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "registrar_endpoint_count", Help: "Endpoints in the registrar's snapshot, by cluster.",
		}, []string{"cluster"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "registrar_sync_duration_seconds", Help: "Time to read the full state of the external registry.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "registrar_sync_errors_total", Help: "Failed reads (polls and watches) of the external registry.",
		}),
		feedLive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "registrar_change_feed_live",
			Help: "1 while the external registry's change feed is live (a full read every backstop interval), 0 while the registrar polls every sync interval.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "registrar_write_batch_size", Help: "Operations per write batch sent to the external registry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "registrar_write_queue_depth", Help: "Accepted writes not yet persisted to the external registry.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "registrar_write_batches_total", Help: "Write batches sent to the external registry, by result (ok, error).",
		}, []string{"result"}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "registrar_watcher_resyncs_total", Help: "Full snapshots sent to watchers that fell behind the history ring.",
		}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "registrar_denied_writes_total", Help: "Requests refused by the write policy, by the rule that refused them.",
		}, []string{"reason"}),
		livenessExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "registrar_liveness_expired_total", Help: "Held entries removed because their agent's session ended their TTL ago.",
		}),
		livenessRestored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "registrar_liveness_restored_total", Help: "Held entries of live sessions registered again after the registry lost or changed them.",
		}),
		livenessRefreshed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "registrar_liveness_refreshed_total", Help: "Held entries written again because the backend also expires held entries on their own, after a long time.",
		}),
	}
	bc := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "registrar_event_broadcast_total", Help: "Events pushed to agents, by type.",
	}, []string{"type"})
	for t := range m.broadcast {
		m.broadcast[t] = bc.WithLabelValues(registrarv1.EndpointEvent_EventType(t).String())
	}
	for _, reason := range []string{"other_node", "owned_by_other_node", "no_node", "no_identity", "not_a_reader"} {
		m.denied.WithLabelValues(reason) // exported at 0, so alerts need no absent()
	}
	m.batches.WithLabelValues("ok")
	m.batches.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(m.connected, m.endpoints, m.syncDuration, m.syncErrors, m.feedLive, m.batchSize, m.queue, bc, m.batches, m.resyncs, m.denied)
	}
	return m
}

func (m *metrics) endpointCount(cluster string, n int) {
	m.endpoints.WithLabelValues(cluster).Set(float64(n))
}

func (m *metrics) queueDepth(n int) { m.queue.Set(float64(n)) }

// registerBackendMetrics exports the backend's series (a registry.Front counts every
// call it makes) beside the registrar's. Replicas in one process that share a backend
// and a metrics registry share its series.
func registerBackendMetrics(reg prometheus.Registerer, backend registry.Registry) error {
	c, ok := backend.(prometheus.Collector)
	if !ok || reg == nil {
		return nil
	}
	var dup prometheus.AlreadyRegisteredError
	if err := reg.Register(c); err != nil && !errors.As(err, &dup) {
		return fmt.Errorf("registrar: backend metrics: %w", err)
	}
	return nil
}
