package registrar

import (
	"testing"
	"time"
)

// The registrar's /metrics carries its backend's calls, counted by the backend's
// registry.Front (startServer's backend is the memory one, behind its front).
func TestMetricsCountBackendCalls(t *testing.T) {
	ts := startServer(t, Config{SyncInterval: 20 * time.Millisecond, BackstopInterval: 20 * time.Millisecond})
	eventually(t, "the registrar's polls are counted as the backend's lists", func() bool {
		for _, m := range scrape(t, ts)["registry_calls_total"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["backend"] == "memory" && labels["op"] == "list" && labels["result"] == "ok" && m.GetCounter().GetValue() >= 1 {
				return true
			}
		}
		return false
	})
}
