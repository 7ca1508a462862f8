package registrar

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// The registrar's /metrics carries its backend's calls, counted by the backend's
// registry.Front.
func TestMetricsCountBackendCalls(t *testing.T) {
	b := memory.New()
	defer b.Close()
	s, err := NewServer(ServerConfig{Registrar: Config{Cluster: "east", Backend: b, SyncInterval: 20 * time.Millisecond},
		Listen: "127.0.0.1:0", HealthListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	ts := &testServer{Server: s}
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
