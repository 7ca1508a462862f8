package ui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/webui"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
)

//go:embed templates
var templates embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{"plural": plural}).ParseFS(templates, "templates/*.tmpl"))

// plural is "1 endpoint", "2 endpoints".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Options configure the page. Zero values take the defaults.
type Options struct {
	// Source is the registrar the page shows.
	Source inspect.Source
	// Refresh is how often an open page fetches a new rendering at least, when
	// no event has said it changed; default 5s.
	Refresh time.Duration
	// History is how many of the latest changes the page keeps for the
	// endpoints' history; default 10,000.
	History int
	// MaxRows caps every table; default 500.
	MaxRows int
	// MaxViewers bounds the open event streams (/ui/events); beyond it they are
	// refused with 503 and the pages poll instead. Default 64.
	MaxViewers int
	// Poll is how often the mirror asks the registrar for changes; default 100ms.
	// StatusEvery is how often it samples the watchers and the backend; default
	// 500ms, and ten times that while nobody has looked for a minute.
	Poll        time.Duration
	StatusEvery time.Duration
	Logger      *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Refresh, 5*time.Second)
	def(&o.Poll, 100*time.Millisecond)
	def(&o.StatusEvery, 500*time.Millisecond)
	for _, p := range []struct {
		v   *int
		def int
	}{{&o.History, 10000}, {&o.MaxRows, 500}, {&o.MaxViewers, 64}} {
		if *p.v <= 0 {
			*p.v = p.def
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Page is the registrar's page. Mount its routes, and Run it to feed it.
type Page struct {
	o       Options
	m       *mirror
	cache   cache
	viewers chan struct{} // a slot per open event stream
	done    chan struct{} // closed when Run returns: the event streams end
	// lastView is when a page, fragment or JSON view was last served, Unix ns.
	lastView atomic.Int64
}

// New returns the page of o.Source.
func New(o Options) *Page {
	o = o.withDefaults()
	return &Page{o: o, m: newMirror(o.History), viewers: make(chan struct{}, o.MaxViewers), done: make(chan struct{})}
}

// Mount registers the page's routes on mux: /ui (the page), /ui/fragment (its
// live part, which live.js fetches), /ui/events (server-sent events, one per
// change), /ui/state.json, /ui/history and the shared assets under /ui/common/.
func (p *Page) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", p.servePage)
	mux.HandleFunc("GET /ui/fragment", p.serveFragment)
	mux.HandleFunc("GET /ui/state.json", p.serveJSON)
	mux.HandleFunc("GET /ui/events", p.serveEvents)
	mux.HandleFunc("GET /ui/history", p.serveHistory)
	webui.MountAssets(mux, "/ui/common/")
}

// Run feeds the mirror until ctx ends: it loads the registrar's endpoints,
// then follows its changes every Poll and samples its status every
// StatusEvery. When it returns, the open event streams end.
func (p *Page) Run(ctx context.Context) {
	defer close(p.done)
	// The status first: whether the registrar has read the backend yet says
	// whether the endpoints are new or were there before (row.early).
	p.sample()
	p.reload()
	poll, status := time.NewTicker(p.o.Poll), time.NewTicker(p.o.StatusEvery)
	defer poll.Stop()
	defer status.Stop()
	last := p.o.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			p.pull()
		case <-status.C:
			// Nobody looking: a sample now and then keeps the batch rate and
			// the lags' history, at a tenth of the cost (a status of 10,000
			// watchers is about 1.5 MB to collect).
			now := p.o.Now()
			if p.watched(now) || now.Sub(last) >= idleEvery*p.o.StatusEvery {
				p.sample()
				last = now
			}
		}
		if !p.m.isReady() {
			// Until the registrar is ready, every poll: the changes up to
			// then are its first read of the backend (mirror.old).
			p.sample()
		}
	}
}

// idleAfter is how long after the last view the page samples the status only
// every idleEvery periods.
const (
	idleAfter = time.Minute
	idleEvery = 10
)

// viewed notes a view of the page.
func (p *Page) viewed() { p.lastView.Store(p.o.Now().UnixNano()) }

// watched reports whether someone has looked at the page lately, or has it open.
func (p *Page) watched(now time.Time) bool {
	return len(p.viewers) > 0 || now.Sub(time.Unix(0, p.lastView.Load())) < idleAfter
}

// pullMax is how many changes one call asks for; pullRounds bounds the calls
// per poll, so that a burst is taken in steps of a few milliseconds each.
const (
	pullMax    = 4096
	pullRounds = 8
)

// pull takes the registrar's changes since the mirror's version.
func (p *Page) pull() {
	for range pullRounds {
		at := p.m.at()
		changes, next, ok := p.o.Source.Changes(at, pullMax)
		if !ok {
			p.o.Logger.Debug("registrar page: behind the registrar's history; reloading", "version", at)
			p.reload()
			return
		}
		if next == at {
			return
		}
		p.m.apply(changes, next, p.o.Now())
	}
}

func (p *Page) reload() {
	eps, v := p.o.Source.Endpoints()
	p.m.load(eps, v, p.o.Now())
}

func (p *Page) sample() { p.m.setStatus(p.o.Source.Status(), p.o.Now()) }

// cache keeps one rendering per filter for a short while: every viewer of a
// filter at one generation of the mirror shares it. Renders are serialized
// under its lock, which is what makes a crowd of viewers cost one.
type cache struct {
	mu      sync.Mutex
	entries map[filter]*rendering
}

type rendering struct {
	gen      uint64
	at       time.Time
	view     view
	fragment []byte
}

// cacheFor is how long a rendering is served while nothing changed: its ages
// and lags go stale, slowly.
const cacheFor = time.Second

// maxCached bounds the filters cached; past it the cache starts over.
const maxCached = 64

// render returns the rendering of f.
func (p *Page) render(f filter) (*rendering, error) {
	gen, _ := p.m.watch()
	now := p.o.Now()
	c := &p.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.entries[f]; r != nil && r.gen == gen && now.Sub(r.at) < cacheFor {
		return r, nil
	}
	r := &rendering{gen: gen, at: now, view: p.m.view(f, p.o.MaxRows, now)}
	renderTables(&r.view)
	var b bytes.Buffer
	if last := c.entries[f]; last != nil {
		b.Grow(len(last.fragment) + len(last.fragment)/8) // most renderings are about as long as the last
	}
	if err := pages.ExecuteTemplate(&b, "fragment", r.view); err != nil {
		return nil, err
	}
	r.fragment = b.Bytes()
	if c.entries == nil || len(c.entries) >= maxCached {
		c.entries = map[filter]*rendering{}
	}
	c.entries[f] = r
	return r, nil
}

// The table rows are written by rows.go, not by a template: html/template
// calls an escaper through reflection for every value, about a microsecond each,
// and a page of 500 endpoint and 500 watcher rows, whose ages and lags change
// every second, cost 5 ms a rendering. A busy registrar's page is rendered when it
// changes, which is while the registrar fans the change out, on the same cores.

// pageData is the whole page: the view, its fragment already rendered.
type pageData struct {
	view
	Fragment      template.HTML // our own template's output
	RefreshMillis int64
}

func (p *Page) servePage(w http.ResponseWriter, r *http.Request) {
	rd, ok := p.rendered(w, r)
	if !ok {
		return
	}
	p.write(w, "page", pageData{view: rd.view, Fragment: template.HTML(rd.fragment), RefreshMillis: p.o.Refresh.Milliseconds()})
}

func (p *Page) serveFragment(w http.ResponseWriter, r *http.Request) {
	if rd, ok := p.rendered(w, r); ok {
		webui.Secure(w, "text/html; charset=utf-8")
		_, _ = w.Write(rd.fragment)
	}
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	rd, ok := p.rendered(w, r)
	if !ok {
		return
	}
	webui.Secure(w, "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rd.view)
}

// rendered returns the rendering for r's filter, or answers r with the error.
func (p *Page) rendered(w http.ResponseWriter, r *http.Request) (*rendering, bool) {
	p.viewed()
	f, err := parseFilter(r)
	if err != nil {
		refuse(w, err)
		return nil, false
	}
	rd, err := p.render(f)
	if err != nil {
		p.o.Logger.Error("registrar page: render", "err", err)
		http.Error(w, "registrar page: render failed", http.StatusInternalServerError)
		return nil, false
	}
	return rd, true
}

// write renders template name into a buffer first, so that a failure is a 500
// rather than half a page.
func (p *Page) write(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		p.o.Logger.Error("registrar page: render", "template", name, "err", err)
		http.Error(w, "registrar page: render failed", http.StatusInternalServerError)
		return
	}
	webui.Secure(w, "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// refuse answers a bad request: 400 and the reason, as plain text.
func refuse(w http.ResponseWriter, err error) {
	if !errors.Is(err, errBadQuery) {
		err = errBadQuery
	}
	http.Error(w, err.Error(), http.StatusBadRequest)
}
