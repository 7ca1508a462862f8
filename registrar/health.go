package registrar

import (
	"fmt"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthHandler serves the health port: /healthz (alive), /readyz (ready once the
// backend has been read in full, and until shutdown begins), /metrics and, with
// debugMemory, /debug/memory; and what mount adds (the web page, server_ui.go), if
// not nil.
func (r *Registrar) healthHandler(g prometheus.Gatherer, debugMemory bool, mount func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-r.closing:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		default:
		}
		select {
		case <-r.view.Ready():
			_, _ = w.Write([]byte("ready\n"))
		default:
			http.Error(w, "not ready: the registry backend has not been read yet", http.StatusServiceUnavailable)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if debugMemory {
		mux.HandleFunc("GET /debug/memory", r.debugMemory)
	}
	if mount != nil {
		mount(mux)
	}
	return mux
}

// debugMemory reports the process's heap and goroutine stacks in use after a
// forced garbage collection, with the open watch streams, one "name value" line
// each: what the benchmark divides by the watchers to get each one's cost.
func (r *Registrar) debugMemory(w http.ResponseWriter, _ *http.Request) {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC() // the first may leave garbage of its own finalizers and sweeps
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "heap_inuse_bytes %d\nstack_inuse_bytes %d\ngoroutines %d\nwatchers %d\n",
		m.HeapInuse, m.StackInuse, runtime.NumGoroutine(), r.Watchers())
}
