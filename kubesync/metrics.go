package kubesync

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/internal/metricset"
)

// Label values of the series below.
const (
	dirExport = "export"
	dirImport = "import"

	kindService = "service"
	kindSlice   = "endpointslice"

	opCreated = "created"
	opUpdated = "updated"
	opDeleted = "deleted"

	entryRegistered   = "registered"
	entryRefreshed    = "refreshed"
	entryUnregistered = "unregistered"
)

// Reasons something was left out, the skipped series' reason label.
const (
	reasonInvalidName     = "invalid_name"     // export: not a DNS-1035 label
	reasonPortClash       = "port_clash"       // export: two protocols on one port, or one port name
	reasonNoPort          = "no_port"          // export: an entry without a port; import: a slice port without a number
	reasonInvalidAddress  = "invalid_address"  // export: an address the API server refuses in a slice
	reasonFQDN            = "fqdn"             // import: an FQDN slice has no address to register
	reasonInvalidEndpoint = "invalid_endpoint" // import: endpoint.Validate refused the entry
)

// metrics are the syncer's series. Every label value is known up front, so each
// series is there from the start, at zero.
type metrics struct {
	objects    *prometheus.CounterVec
	entries    *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	conflicts  *prometheus.CounterVec
	refused    *prometheus.CounterVec
	syncs      *prometheus.CounterVec
	syncErrors *prometheus.CounterVec
	lastSync   *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_objects_total", Help: "Kubernetes objects export created, updated or deleted, by kind.",
		}, []string{"kind", "op"}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_registry_entries_total", Help: "Registry entries import wrote: registered (new or changed), refreshed (unchanged, TTL renewed) or unregistered.",
		}, []string{"op"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_skipped_total", Help: "Services, ports or endpoints left out, by direction and reason; each is counted once when first seen.",
		}, []string{"direction", "reason"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_conflicts_total", Help: "Objects export would have written but that belong to someone else (no kubesync label), by kind; counted once per clash.",
		}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_refused_total", Help: "Writes export made that the API server refused as invalid (422), by kind; counted once per version of the object, which is not written again until it changes.",
		}, []string{"kind"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_syncs_total", Help: "Services synced successfully, by direction.",
		}, []string{"direction"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_kubesync_sync_errors_total", Help: "Syncs that failed and were requeued with backoff, and failed registry reads, by direction.",
		}, []string{"direction"}),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_kubesync_last_sync_success_timestamp_seconds", Help: "Unix time of the last successful sync, by direction.",
		}, []string{"direction"}),
	}
	m.init()
	return m
}

// init creates every series, so a dashboard sees zeros rather than gaps.
func (m *metrics) init() {
	for _, k := range []string{kindService, kindSlice} {
		for _, op := range []string{opCreated, opUpdated, opDeleted} {
			m.objects.WithLabelValues(k, op)
		}
		m.conflicts.WithLabelValues(k)
		m.refused.WithLabelValues(k)
	}
	for _, op := range []string{entryRegistered, entryRefreshed, entryUnregistered} {
		m.entries.WithLabelValues(op)
	}
	for _, r := range []string{reasonInvalidName, reasonPortClash, reasonNoPort, reasonInvalidAddress} {
		m.skipped.WithLabelValues(dirExport, r)
	}
	for _, r := range []string{reasonNoPort, reasonFQDN, reasonInvalidEndpoint} {
		m.skipped.WithLabelValues(dirImport, r)
	}
	for _, d := range []string{dirExport, dirImport} {
		m.syncs.WithLabelValues(d)
		m.syncErrors.WithLabelValues(d)
		m.lastSync.WithLabelValues(d)
	}
}

// collector is every series as one prometheus.Collector.
func (m *metrics) collector() prometheus.Collector {
	return metricset.Set{m.objects, m.entries, m.skipped, m.conflicts, m.refused, m.syncs, m.syncErrors, m.lastSync}
}

// object counts one write of a Kubernetes object.
func (m *metrics) object(kind, op string) { m.objects.WithLabelValues(kind, op).Inc() }
