package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchboard-mesh/switchboard/controlplane/statuspage"
)

// httpHandler serves /healthz (the process is alive), /readyz (serving, and the
// store answers), /metrics and the read-only status page under /status.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: not serving", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := s.store.ListGroups(ctx); err != nil {
			http.Error(w, "not ready: store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	statuspage.New(statuspage.Options{
		Store: s.store, Mode: s.svc.Mode().String(), Errors: s.recent, Refresh: s.o.StatusRefresh,
		Topology: s.o.Config.Topology,
		Logger:   s.log.With("component", "status-page"),
	}).Mount(mux)
	return mux
}
