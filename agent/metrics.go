package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Metrics are the agent's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	entries     prometheus.Gauge
	healthy     *prometheus.GaugeVec
	registered  *prometheus.GaugeVec
	checks      *prometheus.CounterVec
	writes      *prometheus.CounterVec
	applyFail   prometheus.Gauge
	outputs     *prometheus.CounterVec
	outputLast  *prometheus.GaugeVec
	refused     *prometheus.CounterVec
	mirrorState prometheus.Gauge
	draining    prometheus.Gauge
	drains      *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg: pass a registry of your
// own, never the global one.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	entryLabels := []string{"service", "instance"}
	m := &Metrics{
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_entries",
			Help: "Entries the agent publishes: its manifest's and those of other sources (the node's pods)."}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchboard_agent_entry_healthy",
			Help: "1 when every health check of the entry passes."}, entryLabels),
		registered: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchboard_agent_entry_registered",
			Help: "1 when the agent's last write for the entry registered it."}, entryLabels),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_checks_total",
			Help: "Health check runs by kind and result (pass, fail)."}, []string{"kind", "result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_registry_writes_total",
			Help: "Registry writes by op (register, unregister, drain) and result (ok, error)."}, []string{"op", "result"}),
		applyFail: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_manifest_apply_failed",
			Help: "1 while the last manifest (re)load failed; the publish gate is closed."}),
		outputs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_output_updates_total",
			Help: "Updates of rendered and file_sd outputs by result (written, unchanged, error)."}, []string{"output", "result"}),
		outputLast: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchboard_agent_output_last_success_timestamp_seconds",
			Help: "When the output last rendered without error."}, []string{"output"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_render_refused_values_total",
			Help: "Values with control characters a template would have printed (or names and annotation keys holding them), per rendering; each left its endpoint out."}, []string{"output"}),
		mirrorState: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_discovery_endpoints",
			Help: "Endpoints in the agent's copy of the registry."}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_agent_draining",
			Help: "1 while the agent, shutting down, keeps its entries published as draining for the grace period."}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_agent_drains_total",
			Help: "Drains on shutdown by outcome: completed (the grace period ran out), skipped (a second signal), failed (the draining write failed)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.entries, m.healthy, m.registered, m.checks, m.writes, m.applyFail, m.outputs, m.outputLast, m.refused, m.mirrorState,
		m.draining, m.drains)
	return m
}

func (m *Metrics) setEntries(n int) {
	if m != nil {
		m.entries.Set(float64(n))
	}
}

func (m *Metrics) entryState(e endpoint.Endpoint, healthy, registered bool) {
	if m == nil {
		return
	}
	m.healthy.WithLabelValues(e.Service, e.InstanceID()).Set(b2f(healthy))
	m.registered.WithLabelValues(e.Service, e.InstanceID()).Set(b2f(registered))
}

func (m *Metrics) forget(e endpoint.Endpoint) {
	if m != nil {
		m.healthy.DeleteLabelValues(e.Service, e.InstanceID())
		m.registered.DeleteLabelValues(e.Service, e.InstanceID())
	}
}

func (m *Metrics) checkResult(k check.Kind, ok bool) {
	if m != nil {
		m.checks.WithLabelValues(string(k), pick(ok, "pass", "fail")).Inc()
	}
}

func (m *Metrics) write(op string, n int, err error) {
	if m != nil {
		m.writes.WithLabelValues(op, pick(err == nil, "ok", "error")).Add(float64(n))
	}
}

func (m *Metrics) applyFailed(failed bool) {
	if m != nil {
		m.applyFail.Set(b2f(failed))
	}
}

func (m *Metrics) output(name string, wrote bool, err error) {
	if m == nil {
		return
	}
	switch {
	case err != nil:
		m.outputs.WithLabelValues(name, "error").Inc()
		return
	case wrote:
		m.outputs.WithLabelValues(name, "written").Inc()
	default:
		m.outputs.WithLabelValues(name, "unchanged").Inc()
	}
	m.outputLast.WithLabelValues(name).SetToCurrentTime()
}

func (m *Metrics) refusedValues(output string, n int) {
	if m != nil && n > 0 {
		m.refused.WithLabelValues(output).Add(float64(n))
	}
}

func (m *Metrics) discovered(n int) {
	if m != nil {
		m.mirrorState.Set(float64(n))
	}
}

func (m *Metrics) setDraining(on bool) {
	if m != nil {
		m.draining.Set(b2f(on))
	}
}

func (m *Metrics) drained(outcome string) {
	if m != nil {
		m.drains.WithLabelValues(outcome).Inc()
	}
}

func b2f(b bool) float64 { return pick(b, 1.0, 0.0) }

func pick[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}
