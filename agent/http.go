package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics from g, /healthz, which answers 200 "ok" while the agent
// runs (the process being up and serving is what it reports), and /readyz, which
// answers 200 once ready says so and 503 with the reason until then.
func Handler(g prometheus.Gatherer, ready func() (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + why + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}
