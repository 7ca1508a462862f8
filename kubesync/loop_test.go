package kubesync

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	clienttesting "k8s.io/client-go/testing"
)

// Export and import on one namespace: each direction skips what the other wrote,
// so nothing syncs back to where it came from, and once converged the state
// stays put over many resyncs.
func TestExportAndImportTogetherAreStable(t *testing.T) {
	cfg := Config{
		Export: &ExportConfig{Namespace: ns},
		Import: &ImportConfig{Namespace: ns},
		Resync: 10 * time.Millisecond,
	}
	api := userSlice("api-abcde", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "http", port: 8080}},
		sliceEP{addr: "10.1.0.1", node: "n1"})
	e := start(t, cfg, userService("api"), api)
	e.apply(registerAll(ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "http", "10.0.0.2", 8080))...)

	exported := map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1,10.0.0.2"}
	imported := []string{"api/http/10.1.0.1:8080@n1"}
	converged := func() error {
		if err := sameMap(e.exported(), exported); err != nil {
			return err
		}
		return sameList(e.registered(self), imported)
	}
	e.waitFor("converged", converged)

	writes := func() int { return len(mutations(e.fake.Actions())) }
	counters := func() [6]float64 {
		m := e.s.m
		return [6]float64{
			sum(m.objects), testutil.ToFloat64(m.entries.WithLabelValues(entryRegistered)),
			testutil.ToFloat64(m.entries.WithLabelValues(entryUnregistered)), sum(m.conflicts),
			sum(m.syncErrors), sum(m.skipped),
		}
	}
	resyncs := func(n float64) {
		for _, dir := range []string{dirExport, dirImport} {
			c := e.s.m.syncs.WithLabelValues(dir)
			e.atLeast(dir+" resyncs", c, testutil.ToFloat64(c)+n)
		}
	}
	// Let the writes in flight when the state became visible finish (a sync that
	// ran on a cache a moment behind its own create counts as one more attempt).
	resyncs(10)
	w0, c0 := writes(), counters()
	resyncs(20)

	if err := converged(); err != nil {
		t.Fatalf("state moved after converging: %v", err)
	}
	if w := writes(); w != w0 {
		t.Errorf("%d writes to the API server after converging, want none: %v", w-w0, mutations(e.fake.Actions())[w0:])
	}
	if c := counters(); c != c0 {
		t.Errorf("counters (objects, registered, unregistered, conflicts, errors, skipped) moved from %v to %v", c0, c)
	}
	// Neither direction wrote back what the other brought in.
	if got := e.registered(self); len(got) != 1 {
		t.Errorf("this cluster's entries %q: web was imported back", got)
	}
	if _, ok := e.exported()["api"]; ok || sum(e.s.m.conflicts) != 0 {
		t.Errorf("api, imported from this cluster, was exported back (or tried to be: %g conflicts)", sum(e.s.m.conflicts))
	}
	if got := e.registered(""); len(got) != 3 {
		t.Errorf("registry holds %q, want web twice and api once", got)
	}
}

// mutations are the actions that write.
func mutations(actions []clienttesting.Action) []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range actions {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete", "deletecollection":
			out = append(out, a)
		}
	}
	return out
}

// sum adds up every series of c.
func sum(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		total += d.GetCounter().GetValue() + d.GetGauge().GetValue()
	}
	return total
}
