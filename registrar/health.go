package registrar

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthHandler serves the health port: /healthz (alive), /readyz (ready once the
// backend has been read in full, and until shutdown begins) and /metrics.
func (r *Registrar) healthHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-r.s.closing:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		default:
		}
		select {
		case <-r.s.ready:
			_, _ = w.Write([]byte("ready\n"))
		default:
			http.Error(w, "not ready: the registry backend has not been read yet", http.StatusServiceUnavailable)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}
