package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/webui"
)

//go:embed templates
var templates embed.FS

var page = template.Must(template.New("").Funcs(template.FuncMap{
	"clock":    clock,
	"stamp":    stamp,
	"ago":      ago,
	"short":    short,
	"status":   status,
	"counters": counters,
	"seconds":  seconds,
	"last":     last,
	"plural":   plural,
}).ParseFS(templates, "templates/*.tmpl"))

// Defaults of Options.
const (
	DefaultRefresh    = 5 * time.Second
	DefaultMaxClients = 64
	DefaultHeartbeat  = 15 * time.Second
)

// Options configure the page.
type Options struct {
	Source Source
	// Refresh is how often an open page fetches a fresh rendering at least, events
	// or not; DefaultRefresh when zero.
	Refresh time.Duration
	// MaxClients bounds the open event streams; one more is answered 503 and its
	// page falls back to polling. DefaultMaxClients when zero.
	MaxClients int
	// Heartbeat is how often an idle event stream sends a comment, so proxies and
	// browsers keep it open; DefaultHeartbeat when zero.
	Heartbeat time.Duration
	// Done, when closed, ends the open event streams: the agent is stopping, and
	// its HTTP server's graceful shutdown waits for them.
	Done   <-chan struct{}
	Logger *slog.Logger
}

// Page serves the agent's page. Register it with Mount.
type Page struct {
	o     Options
	slots chan struct{} // one per open event stream
}

// New returns the page.
func New(o Options) *Page {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.MaxClients <= 0 {
		o.MaxClients = DefaultMaxClients
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Page{o: o, slots: make(chan struct{}, o.MaxClients)}
}

// Mount registers the page's routes on mux: /ui (the page), /ui/fragment (its live
// part, what the script fetches), /ui/events (the event stream),
// /ui/state.json and the shared assets under /ui/common/.
func (p *Page) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", p.serveHTML("page"))
	mux.HandleFunc("GET /ui/{$}", p.redirect)
	mux.HandleFunc("GET /ui/fragment", p.serveHTML("fragment"))
	mux.HandleFunc("GET /ui/state.json", p.serveJSON)
	mux.HandleFunc("GET /ui/events", p.serveEvents)
	webui.MountAssets(mux, "/ui/common/")
}

// serveHTML renders the page, or its live part, for the entries the query asks for.
func (p *Page) serveHTML(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		filter, err := parseQuery(r.URL.RawQuery)
		if err != nil {
			refuse(w, http.StatusBadRequest, err.Error())
			return
		}
		var b bytes.Buffer
		st := p.o.Source.State(Query{Filter: filter, Limit: MaxEntries})
		if err := page.ExecuteTemplate(&b, name, newView(st, filter, p.o.Refresh)); err != nil {
			p.o.Logger.Error("agent page: render", "err", err)
			refuse(w, http.StatusInternalServerError, "agent page: render failed")
			return
		}
		webui.Secure(w, "text/html; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	}
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	filter, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	webui.Secure(w, "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(filtered(p.o.Source.State(Query{Filter: filter}), filter))
}

// redirect sends /ui/ to /ui, where the page's relative links resolve.
func (p *Page) redirect(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	target := "/ui"
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, target, http.StatusMovedPermanently)
}

// refuse answers a short plain-text reason. Reasons are fixed texts, never the
// request's input.
func refuse(w http.ResponseWriter, code int, reason string) {
	webui.Secure(w, "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(reason + "\n"))
}
