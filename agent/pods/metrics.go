package pods

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the package's Prometheus series. A nil *Metrics records nothing.
type Metrics struct {
	requests    *prometheus.HistogramVec
	invalid     *prometheus.CounterVec
	records     prometheus.Gauge
	bad         prometheus.Counter
	managed     prometheus.Gauge
	corrections *prometheus.CounterVec
}

// Correction reasons (switchboard_agent_pod_reconcile_corrections_total{reason}).
const (
	// CorrectionPodGone: a record whose pod is gone was deleted (a lost CNI DEL).
	CorrectionPodGone = "pod_gone"
	// CorrectionNoRecord: a Running pod with addresses and no record got entries
	// anyway (its ADD came while the agent was down).
	CorrectionNoRecord = "no_record"
	// CorrectionSkipped: a managed pod registers nothing; the log says why.
	CorrectionSkipped = "skipped"
)

// NewMetrics creates the metrics and registers them with reg: pass a registry of your
// own, never the global one. It fails when one of them is registered already.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchboard_agent_cni_request_duration_seconds",
			Help:    "Time the agent's CNI server took to handle a request, by method (add, del, check, gc, status) and result (a gRPC code); add includes the record's fsyncs.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)}, []string{"method", "result"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_cni_invalid_requests_total",
			Help: "CNI requests refused as invalid (InvalidArgument), by method; nothing was recorded."}, []string{"method"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_pod_records",
			Help: "Pod attachments recorded on the node's disk."}),
		bad: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchboard_agent_pod_records_bad_total",
			Help: "Attachment record files that could not be read and were moved aside (*.bad)."}),
		managed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_pods_managed",
			Help: "Pods of the node whose endpoints the agent publishes (held ones included)."}),
		corrections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_pod_reconcile_corrections_total",
			Help: "Differences between the CNI records and the Kubernetes API that the reconciler settled, by reason (pod_gone, no_record, skipped)."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.invalid, m.records, m.bad, m.managed, m.corrections} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("pods metrics: %w", err)
		}
	}
	for _, r := range []string{CorrectionPodGone, CorrectionNoRecord, CorrectionSkipped} {
		m.corrections.WithLabelValues(r) // present at 0, so rate() and alerts see them from the start
	}
	return m, nil
}

func (m *Metrics) request(method, result string, d time.Duration) {
	if m != nil {
		m.requests.WithLabelValues(method, result).Observe(d.Seconds())
	}
}

func (m *Metrics) invalidRequest(method string) {
	if m != nil {
		m.invalid.WithLabelValues(method).Inc()
	}
}

func (m *Metrics) setRecords(n int) {
	if m != nil {
		m.records.Set(float64(n))
	}
}

func (m *Metrics) badRecord() {
	if m != nil {
		m.bad.Inc()
	}
}

func (m *Metrics) setManaged(n int) {
	if m != nil {
		m.managed.Set(float64(n))
	}
}

func (m *Metrics) correction(reason string) {
	if m != nil {
		m.corrections.WithLabelValues(reason).Inc()
	}
}
