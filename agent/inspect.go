package agent

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/dns"
	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/agent/ui"
	"github.com/switchboard-mesh/switchboard/agent/xds"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// UIOptions configure the agent's web page (package ui) on its HTTP port.
type UIOptions struct {
	// Disabled leaves /ui off.
	Disabled bool
	// Refresh is how often an open page fetches a fresh rendering at least;
	// ui.DefaultRefresh when zero.
	Refresh time.Duration
}

// withUI serves the agent's page beside h (/metrics, /healthz, /readyz) and keeps
// the page's change counter current; with the page off it returns h.
func withUI(ctx context.Context, g *group, cancel context.CancelFunc, cfg Config, ag *Agent, disc *Discovery,
	ready func() (bool, string), h http.Handler) http.Handler {
	if cfg.UI.Disabled {
		return h
	}
	in := newInspector(cfg, ag, disc, ready)
	if in.xds != nil {
		in.xds.OnChange(ag.changes.Bump)
	}
	if in.registrar != nil {
		g.spawn(cancel, func() error { watchRegistrar(ctx, in.registrar, &ag.changes); return nil })
	}
	mux := http.NewServeMux()
	ui.New(ui.Options{Source: in, Refresh: cfg.UI.Refresh, Done: ctx.Done(), Logger: cfg.Logger}).Mount(mux)
	mux.Handle("/", h)
	return mux
}

// What the inspector reads of the discovery servers and the registry client; the
// agent knows them only as Servers and a registry.Registry.
type (
	xdsView interface {
		Addr() net.Addr
		Clients() []xds.Client
		OnChange(func())
	}
	dnsView interface {
		Stats() dns.Stats
	}
	registrarConn interface {
		Connection() client.Connection
	}
)

// inspector is the agent's side of its page: a ui.Source that copies, read-only,
// the loop's published status, the outputs' last updates, the discovery servers'
// clients and the registrar connection into the page's model.
type inspector struct {
	ag        *Agent
	disc      *Discovery // nil without outputs
	ready     func() (bool, string)
	node      string
	backend   string
	xds       xdsView       // nil without an xDS server
	dns       dnsView       // nil without a DNS server
	registrar registrarConn // nil unless the backend is the registrar
}

func newInspector(cfg Config, ag *Agent, disc *Discovery, ready func() (bool, string)) *inspector {
	in := &inspector{ag: ag, disc: disc, ready: ready}
	in.node, _ = os.Hostname()
	for _, s := range cfg.Servers {
		if v, ok := s.(xdsView); ok && in.xds == nil {
			in.xds = v
		}
		if v, ok := s.(dnsView); ok && in.dns == nil {
			in.dns = v
			v.Stats() // the query rate's first sample: the page has a rate when first opened
		}
	}
	in.backend, in.registrar = backendOf(cfg.Registry)
	return in
}

// backendOf names the registry backend and finds the registrar client's
// connection, on the client itself or on the driver behind a registry.Front.
func backendOf(r registry.Registry) (string, registrarConn) {
	if r == nil {
		return "", nil
	}
	name := ""
	if n, ok := r.(interface{ Name() string }); ok {
		name = n.Name()
	}
	if c, ok := r.(registrarConn); ok {
		return name, c
	}
	if f, ok := r.(interface{ Driver() registry.Driver }); ok {
		if c, ok := f.Driver().(registrarConn); ok {
			return name, c
		}
	}
	return name, nil
}

var _ ui.Source = (*inspector)(nil)

// Changes is the version of what the page shows.
func (in *inspector) Changes() (uint64, <-chan struct{}) { return in.ag.changes.Version() }

// State copies what the page shows. Every entry is listed, for the page's counts,
// but only those q shows get their checks converted, histories and all: a page
// shows at most ui.MaxEntries of thousands.
func (in *inspector) State(q ui.Query) ui.State {
	s := ui.State{Generated: time.Now(), Node: in.node, Backend: in.backend, Files: []ui.File{}}
	s.Ready, s.NotReady = in.ready()
	statuses := in.ag.Status()
	s.Entries = make([]ui.Entry, 0, len(statuses))
	shown := 0
	for _, st := range statuses {
		e := entryView(st)
		if (q.Limit == 0 || shown < q.Limit) && q.Matches(e) {
			e.Checks = checksView(st.Checks)
			shown++
		}
		s.Entries = append(s.Entries, e)
	}
	if in.disc != nil {
		s.Files = in.disc.files()
	}
	if in.xds != nil {
		s.XDS = xdsState(in.xds)
	}
	if in.dns != nil {
		st := in.dns.Stats()
		s.DNS = &ui.DNS{Addr: st.Addr, Domain: st.Domain, Queries: st.Queries, PerSecond: st.PerSecond, OverSeconds: st.Over.Seconds()}
	}
	if in.registrar != nil {
		c := in.registrar.Connection()
		s.Registrar = &ui.Registrar{Target: c.Target, Channel: c.Channel, Connected: c.Connected, Since: c.Since,
			LastError: c.LastError, LastErrorAt: c.LastErrorAt, Version: c.Version}
	}
	return s
}

// entryView is an entry without its checks (checksView).
func entryView(st EntryStatus) ui.Entry {
	k := st.Key
	return ui.Entry{Key: k.String(), Cluster: k.Cluster, Service: k.Service, Protocol: k.Protocol,
		Address: endpoint.HostPort(k.Address, k.Port), Source: cmp.Or(st.Source, "manifest"), State: entryState(st),
		GateOpen: st.Reason == "", Reason: st.Reason, Since: st.Since, WriteError: st.WriteError,
		Region: st.Region, Zone: st.Zone, Health: st.Health.String()}
}

func checksView(cs []CheckStatus) []ui.Check {
	out := make([]ui.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, checkView(c))
	}
	return out
}

// entryState says where an entry stands with the registry, in one word.
func entryState(st EntryStatus) string {
	switch {
	case st.Registered:
		return ui.StatePublished
	case st.Reason == ReasonNoOp: // before held: in dry-run nothing is written, held or not
		return ui.StateDryRun
	case st.Held:
		return ui.StateHeld
	case st.Reason == "":
		return ui.StatePublishing
	case st.Reason == ReasonPending || st.Reason == "starting":
		return ui.StateWaiting
	}
	return ui.StateWithdrawn
}

func checkView(c CheckStatus) ui.Check {
	s := c.State
	v := ui.Check{Name: c.Check, Healthy: c.Healthy, Pending: s.Pending, Rise: s.Rise, Fall: s.Fall,
		Passes: s.Passes, Failures: s.Failures, Results: s.Results, Output: s.Output, Changed: s.Changed}
	if s.Results == 0 && c.LastError != "" {
		v.Output = c.LastError // the check could not start (check.New): why, instead of no result for ever
	}
	h := s.History()
	v.History = make([]ui.Result, len(h))
	for i, r := range h {
		v.History[i] = ui.Result{At: r.At, OK: r.OK}
	}
	return v
}

func xdsState(x xdsView) *ui.XDS {
	out := &ui.XDS{Addr: x.Addr().String(), Clients: []ui.XDSClient{}}
	for _, c := range x.Clients() {
		v := ui.XDSClient{Node: c.Node, Delta: c.Delta, Stream: c.Stream, Since: c.Since, Region: c.Region, Zone: c.Zone}
		for _, t := range c.Types {
			v.Types = append(v.Types, ui.XDSType{Type: t.Type, Wildcard: t.Wildcard, Names: t.Names, Version: t.Version})
		}
		out.Clients = append(out.Clients, v)
	}
	return out
}

// watchRegistrar bumps changes when the registrar connection changes. The client
// has no callback for that, so it is sampled every second while the agent runs.
func watchRegistrar(ctx context.Context, r registrarConn, changes *ui.Changes) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := r.Connection()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := r.Connection(); now != last {
			last = now
			changes.Bump()
		}
	}
}

// outputLog keeps each output's last update, by output name, for the page.
type outputLog struct {
	mu sync.Mutex
	m  map[string]outputUpdate
}

type outputUpdate struct {
	updated, written, errAt time.Time
	err                     string
}

func (l *outputLog) record(name string, wrote bool, err error, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]outputUpdate{}
	}
	u := l.m[name]
	if err != nil {
		u.err, u.errAt = err.Error(), now
	} else {
		u.err, u.errAt, u.updated = "", time.Time{}, now
	}
	if wrote {
		u.written = now // a command that failed after the write still wrote
	}
	l.m[name] = u
}

func (l *outputLog) get(name string) outputUpdate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[name]
}

// files lists the outputs that are files (templates, file_sd) with their last
// update; the discovery servers are shown on their own.
func (d *Discovery) files() []ui.File {
	out := []ui.File{}
	for _, o := range d.outputs {
		var f ui.File
		switch o := o.(type) {
		case *render.Output:
			f = ui.File{Kind: "template", Path: o.Path()}
		case *filesd.Output:
			f = ui.File{Kind: "file_sd", Path: o.Path}
		default:
			continue
		}
		u := d.updates.get(o.Name())
		f.Updated, f.Written, f.Error, f.ErrorAt = u.updated, u.written, u.err, u.errAt
		out = append(out, f)
	}
	return out
}

// errText is an error's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
