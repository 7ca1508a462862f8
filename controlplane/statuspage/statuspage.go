package statuspage

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/internal/webui"
)

// assets are served as they are; templates are not served.
var (
	//go:embed assets
	assets embed.FS
	//go:embed templates
	templates embed.FS
)

var page = template.Must(template.New("").Funcs(template.FuncMap{
	"states": sortedStates,
	"join":   strings.Join,
	"ago":    func(t, now time.Time) string { return now.Sub(t).Truncate(time.Second).String() },
}).ParseFS(templates, "templates/*.tmpl"))

// Options configure the page.
type Options struct {
	Store store.Store
	// Mode is shown in the header ("api" or "config").
	Mode string
	// Topology is the config file's topology section, whose segments the page lists
	// in config mode (in API mode they are read from the store).
	Topology *config.Topology
	// Errors are the recent reconcile errors and the nodes that do not answer; nil
	// shows none.
	Errors *ErrorLog
	// Refresh is how often an open page fetches a new rendering; 2 s when zero.
	Refresh time.Duration
	Logger  *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Page serves the status page. Register it with Mount.
type Page struct {
	o Options

	// One snapshot serves every viewer for a short while, so many open pages cost
	// the store one read per interval rather than one per viewer.
	mu      sync.Mutex
	cached  Snapshot
	cacheAt time.Time
}

// New returns the page.
func New(o Options) *Page {
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Page{o: o}
}

// Mount registers the page's routes on mux: /status (the page), /status/fragment
// (its live part, what the script fetches), /status/state.json and the assets.
func (p *Page) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /status", p.serve("page", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /status/fragment", p.serve("fragment", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /status/state.json", p.serveJSON)
	mux.Handle("GET /status/assets/", http.StripPrefix("/status/", http.FileServerFS(assets)))
	webui.MountAssets(mux, "/status/common/")
}

// snapshot returns a snapshot no older than a quarter of the refresh interval.
func (p *Page) snapshot(ctx context.Context) (Snapshot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Now()
	if !p.cacheAt.IsZero() && now.Sub(p.cacheAt) < p.o.Refresh/4 {
		return p.cached, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := build(ctx, p.o, now)
	if err != nil {
		return s, err
	}
	p.cached, p.cacheAt = s, now
	return s, nil
}

type view struct {
	Snapshot
	RefreshMillis int64
	MaxRows       int
}

func (p *Page) serve(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := p.snapshot(r.Context())
		if err != nil {
			p.o.Logger.Warn("status page: cannot read the store", "err", err)
			http.Error(w, "status unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		var b bytes.Buffer
		if err := page.ExecuteTemplate(&b, name, view{Snapshot: s, RefreshMillis: p.o.Refresh.Milliseconds(), MaxRows: MaxRows}); err != nil {
			p.o.Logger.Error("status page: render", "err", err)
			http.Error(w, "status page: render failed", http.StatusInternalServerError)
			return
		}
		secure(w, contentType)
		_, _ = w.Write(b.Bytes())
	}
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	s, err := p.snapshot(r.Context())
	if err != nil {
		http.Error(w, "status unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	secure(w, "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
}

// secure sets the shared page headers (webui.Secure).
func secure(w http.ResponseWriter, contentType string) { webui.Secure(w, contentType) }

func sortedStates(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return attention[out[i]] < attention[out[j]] })
	return out
}
