package ui

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
)

// view is what the page shows for one filter, also served as JSON. Every
// table is capped at maxRows rows: a registrar of 100,000 endpoints renders
// its first 500 in a few milliseconds, and the page says how many more match.
type view struct {
	Cluster   string    `json:"cluster"`
	Version   uint64    `json:"version"`
	Ready     bool      `json:"ready"`
	Generated time.Time `json:"generated"`
	Filter    filter    `json:"filter"`
	// Total is every endpoint the registrar holds; Matching those the filter
	// selects.
	Total     int               `json:"total"`
	Matching  int               `json:"matching"`
	Clusters  int               `json:"clusters"`
	Services  table[serviceRow] `json:"services"`
	Endpoints endpointTable     `json:"endpoints"`
	Watchers  watcherTable      `json:"watchers"`
	Backend   backendView       `json:"backend"`
	Peers     table[peerRow]    `json:"peers"`
}

// table is the first rows of a list and how many more there are.
type table[T any] struct {
	Rows []T `json:"rows"`
	More int `json:"more"`
}

type serviceRow struct {
	Name      string `json:"name"`
	Endpoints int    `json:"endpoints"`
	Link      string `json:"-"`
}

type endpointTable struct {
	Groups []group `json:"groups"`
	More   int     `json:"more"`
}

// group is the endpoints of one cluster shown; Count is every one matching.
type group struct {
	Cluster string        `json:"cluster"`
	Count   int           `json:"count"`
	Rows    []endpointRow `json:"rows"`
	// HTML is the rows rendered (rows.go), for the page.
	HTML template.HTML `json:"-"`
}

type endpointRow struct {
	Key      string `json:"key"`
	Cluster  string `json:"cluster"`
	Service  string `json:"service"`
	Protocol string `json:"protocol"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	HostPort string `json:"-"`
	Node     string `json:"node,omitempty"`
	// FirstSeen is when the page first saw the endpoint; AtLeast is true when
	// it was there already when the page started.
	FirstSeen   time.Time `json:"firstSeen"`
	AtLeast     bool      `json:"atLeast"`
	Age         string    `json:"-"`
	TTL         string    `json:"ttl,omitempty"`
	Priority    int       `json:"priority"`
	Weight      int       `json:"weight"`
	Annotations []string  `json:"annotations,omitempty"`
	Region      string    `json:"region,omitempty"`
	Zone        string    `json:"zone,omitempty"`
	Health      string    `json:"health"`
	History     string    `json:"-"`
	// Cells are the row's text as the table shows it, strings all: each value
	// a template writes is an escaper call, and those of other types cost a
	// formatting of their own (500 rows were 6 ms to render, half of it that).
	Seen    string `json:"-"` // FirstSeen, for the age's title
	TTLText string `json:"-"`
	Weights string `json:"-"` // "priority / weight"
	Place   string `json:"-"` // "region / zone", or what there is of it
}

type watcherTable struct {
	table[watcherRow]
	Total   int           `json:"total"`
	Lagging int           `json:"lagging"`
	HTML    template.HTML `json:"-"` // the rows rendered (rows.go), for the page
}

type watcherRow struct {
	inspect.Watcher
	Scope   string `json:"-"`
	Lagging bool   `json:"lagging"`
	Age     string `json:"-"`
}

type backendView struct {
	inspect.Backend
	Mode      string  `json:"mode"`
	BatchRate float64 `json:"batchesPerSecond"`
	Rate      string  `json:"-"`
	SyncAgo   string  `json:"-"`
	ErrorAgo  string  `json:"-"`
}

type peerRow struct {
	Cluster   string    `json:"cluster"`
	Endpoints int       `json:"endpoints"`
	Changed   time.Time `json:"changed"` // zero: not since the page started
	Ago       string    `json:"-"`
	Link      string    `json:"-"`
}

// view builds the view of f from the mirror.
func (m *mirror) view(f filter, maxRows int, now time.Time) view {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.status
	v := view{Cluster: st.Cluster, Version: m.version, Ready: st.Ready, Generated: now, Filter: f,
		Total: m.rows.len(), Clusters: len(m.groups)}
	rows, services, clusters := m.match(f, maxRows)
	v.Matching = sumValues(services)
	v.Services = serviceTable(services, f, maxRows)
	v.Endpoints = m.endpointTable(rows, clusters, v.Matching, now)
	v.Watchers = m.watcherTable(f, maxRows, now)
	v.Backend = m.backendView(now)
	v.Peers = m.peers(maxRows, now)
	return v
}

// match returns the first maxRows endpoints f selects, in the page's order, and
// how many it selects per service and per cluster. It walks the groups of rows
// (cluster, then service) in order, reading the rows of the first ones only; a
// node's endpoints, few, are each looked at.
func (m *mirror) match(f filter, maxRows int) (rows []*row, services, clusters map[string]int) {
	services, clusters = map[string]int{}, map[string]int{}
	if f.Node != "" {
		first := newTop(maxRows, rowLess)
		for r := range m.byNode[f.Node] {
			if f.match(&r.ep) {
				services[r.ep.Service]++
				clusters[r.ep.Cluster]++
				first.push(r)
			}
		}
		return first.sorted(), services, clusters
	}
	for _, c := range sortedKeys(m.groups, f.Cluster) {
		bySvc := m.groups[c]
		for _, s := range sortedKeys(bySvc, f.Service) {
			set := bySvc[s]
			services[s] += len(set)
			clusters[c] += len(set)
			if need := maxRows - len(rows); need > 0 {
				first := newTop(need, rowLess)
				for r := range set {
					first.push(r)
				}
				rows = append(rows, first.sorted()...)
			}
		}
	}
	return rows, services, clusters
}

// sortedKeys returns m's keys in order; only want, if want is set.
func sortedKeys[V any](m map[string]V, want string) []string {
	if want == "" {
		return slices.Sorted(maps.Keys(m))
	}
	if _, ok := m[want]; ok {
		return []string{want}
	}
	return nil
}

// rowLess is the page's order: by cluster, service, address (as IPs), port and
// protocol.
func rowLess(a, b *row) bool {
	x, y := &a.ep, &b.ep
	if c := cmp.Compare(x.Cluster, y.Cluster); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(x.Service, y.Service); c != 0 {
		return c < 0
	}
	if c := compareAddr(a, b); c != 0 {
		return c < 0
	}
	return cmp.Or(cmp.Compare(x.Port, y.Port), cmp.Compare(x.Protocol, y.Protocol)) < 0
}

// compareAddr orders the rows' addresses as IPs (IPv4 before IPv6), then as
// text.
func compareAddr(a, b *row) int {
	switch {
	case a.v4 && b.v4:
		return cmp.Or(cmp.Compare(a.ip4, b.ip4), cmp.Compare(a.ep.Address, b.ep.Address))
	case a.ep.Address == b.ep.Address:
		return 0
	}
	x, _ := netip.ParseAddr(a.ep.Address)
	y, _ := netip.ParseAddr(b.ep.Address)
	return cmp.Or(x.Compare(y), cmp.Compare(a.ep.Address, b.ep.Address))
}

func serviceTable(counts map[string]int, f filter, maxRows int) table[serviceRow] {
	names := slices.Sorted(maps.Keys(counts))
	t := table[serviceRow]{Rows: []serviceRow{}, More: max(0, len(names)-maxRows)}
	for _, n := range names[:min(len(names), maxRows)] {
		t.Rows = append(t.Rows, serviceRow{Name: n, Endpoints: counts[n], Link: f.with("service", n)})
	}
	return t
}

func (m *mirror) endpointTable(rows []*row, clusters map[string]int, matching int, now time.Time) endpointTable {
	t := endpointTable{Groups: []group{}, More: matching - len(rows)}
	for _, r := range rows {
		if n := len(t.Groups); n == 0 || t.Groups[n-1].Cluster != r.ep.Cluster {
			t.Groups = append(t.Groups, group{Cluster: r.ep.Cluster, Count: clusters[r.ep.Cluster]})
		}
		g := &t.Groups[len(t.Groups)-1]
		g.Rows = append(g.Rows, endpointView(r, now))
	}
	return t
}

func endpointView(r *row, now time.Time) endpointRow {
	e := &r.ep
	k := e.Key()
	v := endpointRow{Key: k.String(), Cluster: e.Cluster, Service: e.Service, Protocol: e.Protocol, Address: e.Address,
		Port: e.Port, HostPort: endpoint.HostPort(e.Address, e.Port), Node: e.Node, FirstSeen: r.seenAt(), AtLeast: r.early,
		Age: ago(now.Sub(r.seenAt())), TTL: e.TTL.String(), Priority: e.Priority, Weight: e.Weight,
		Annotations: annotations(e.Annotations), Region: e.Region, Zone: e.Zone, Health: e.Health.String(),
		History: historyLink(k)}
	if r.early {
		v.Age = "≥ " + v.Age
	}
	v.Seen = v.FirstSeen.Format("15:04:05")
	v.TTLText = cmp.Or(v.TTL, "—")
	v.Weights = strconv.Itoa(e.Priority) + " / " + strconv.Itoa(e.Weight)
	v.Place = place(e.Region, e.Zone)
	return v
}

// annotations are an endpoint's annotations as sorted key=value strings, each
// value cut to maxShown bytes (they may have 4 KiB each, 64 of them).
func annotations(a map[string]string) []string {
	out := make([]string, 0, len(a))
	for _, k := range slices.Sorted(maps.Keys(a)) {
		out = append(out, k+"="+shorten(a[k]))
	}
	return out
}

const maxShown = 80

func shorten(v string) string {
	if len(v) <= maxShown {
		return v
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", v[:cut], len(v))
}

// watcherTable lists the watch streams f's node and cluster select, the ones
// lagging first. Only the rows shown are built.
func (m *mirror) watcherTable(f filter, maxRows int, now time.Time) watcherTable {
	t := watcherTable{table: table[watcherRow]{Rows: []watcherRow{}}, Total: len(m.status.Watchers)}
	var sel []*inspect.Watcher
	for i := range m.status.Watchers {
		w := &m.status.Watchers[i]
		if (f.Node != "" && f.Node != w.Node) || (f.Cluster != "" && f.Cluster != w.Cluster) {
			continue
		}
		if m.lagging[w.ID] {
			t.Lagging++
		}
		sel = append(sel, w)
	}
	slices.SortFunc(sel, func(a, b *inspect.Watcher) int {
		return cmp.Or(-compareBool(m.lagging[a.ID], m.lagging[b.ID]), -cmp.Compare(a.Lag, b.Lag), cmp.Compare(a.ID, b.ID))
	})
	t.More = max(0, len(sel)-maxRows)
	for _, w := range sel[:min(len(sel), maxRows)] {
		t.Rows = append(t.Rows, watcherRow{Watcher: *w, Scope: scope(*w), Lagging: m.lagging[w.ID], Age: ago(now.Sub(w.Since))})
	}
	return t
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// scope describes what a watcher watches.
func scope(w inspect.Watcher) string {
	switch {
	case w.AllServices:
		return "all services"
	case w.ScopeSize == 0:
		return "no service"
	case w.ScopeSize > len(w.Services):
		return fmt.Sprintf("%s and %d more", strings.Join(w.Services, ", "), w.ScopeSize-len(w.Services))
	}
	return strings.Join(w.Services, ", ")
}

func (m *mirror) backendView(now time.Time) backendView {
	b := m.status.Backend
	v := backendView{Backend: b, BatchRate: m.rate, Rate: formatRate(m.rate)}
	switch {
	case b.Feed:
		v.Mode = "native watch (the whole backend is listed every " + b.BackstopInterval.String() + ")"
	case b.NoFeed:
		v.Mode = "polling every " + b.SyncInterval.String() + " (the backend has no change feed)"
	case b.LastSync.IsZero():
		v.Mode = "starting"
	default:
		v.Mode = "polling every " + b.SyncInterval.String() + " (the change feed is down)"
	}
	if !b.LastSync.IsZero() {
		v.SyncAgo = ago(now.Sub(b.LastSync))
	}
	if !b.LastErrorAt.IsZero() {
		v.ErrorAgo = ago(now.Sub(b.LastErrorAt))
	}
	return v
}

// peers are the clusters other than the registrar's own.
func (m *mirror) peers(maxRows int, now time.Time) table[peerRow] {
	names := slices.Sorted(maps.Keys(m.groups))
	names = slices.DeleteFunc(names, func(c string) bool { return c == m.status.Cluster })
	t := table[peerRow]{Rows: []peerRow{}, More: max(0, len(names)-maxRows)}
	for _, c := range names[:min(len(names), maxRows)] {
		p := peerRow{Cluster: c, Endpoints: m.groups.count(c), Changed: m.touched[c], Link: filter{}.with("cluster", c)}
		if !p.Changed.IsZero() {
			p.Ago = ago(now.Sub(p.Changed))
		}
		t.Rows = append(t.Rows, p)
	}
	return t
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// ago renders a duration the way the page shows ages: "42s", "5m12s", "3h5m",
// "2d3h".
func ago(d time.Duration) string {
	d = max(d, 0).Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func formatRate(r float64) string { return fmt.Sprintf("%.1f", r) }

// top keeps the k least of the items pushed: a heap whose root is the greatest
// kept, so an item that would not be shown costs one comparison.
type top[T any] struct {
	k    int
	less func(a, b T) bool
	h    []T
}

func newTop[T any](k int, less func(a, b T) bool) *top[T] { return &top[T]{k: k, less: less} }

func (t *top[T]) push(x T) {
	switch {
	case len(t.h) < t.k:
		t.h = append(t.h, x)
		t.up(len(t.h) - 1)
	case t.k > 0 && t.less(x, t.h[0]):
		t.h[0] = x
		t.down(0)
	}
}

// sorted returns the items kept, least first.
func (t *top[T]) sorted() []T {
	slices.SortFunc(t.h, func(a, b T) int {
		switch {
		case t.less(a, b):
			return -1
		case t.less(b, a):
			return 1
		}
		return 0
	})
	return t.h
}

func (t *top[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(t.h[p], t.h[i]) {
			return
		}
		t.h[p], t.h[i] = t.h[i], t.h[p]
		i = p
	}
}

func (t *top[T]) down(i int) {
	for {
		big := i
		for _, c := range [...]int{2*i + 1, 2*i + 2} {
			if c < len(t.h) && t.less(t.h[big], t.h[c]) {
				big = c
			}
		}
		if big == i {
			return
		}
		t.h[i], t.h[big] = t.h[big], t.h[i]
		i = big
	}
}

// place is the locality as a cell shows it: "region / zone", either alone, or "—".
func place(region, zone string) string {
	switch {
	case region != "" && zone != "":
		return region + " / " + zone
	case region == "" && zone == "":
		return "—"
	}
	return region + zone
}
