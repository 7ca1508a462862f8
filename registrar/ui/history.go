package ui

import (
	"net/http"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// historyView is the page of one endpoint's recent changes.
type historyView struct {
	Key string
	// Current is the endpoint now, nil when the registrar does not hold it.
	Current *endpointRow
	Events  []historyRow
	// Size is how many changes (of every endpoint) the page keeps, Held how
	// many it holds now, Since since when it holds every change.
	Size, Held int
	Since      time.Time
	Back       string
}

type historyRow struct {
	At          time.Time
	Version     uint64
	Type        string
	Node        string
	TTL         string
	Priority    int
	Weight      int
	Annotations []string
}

func (p *Page) serveHistory(w http.ResponseWriter, r *http.Request) {
	k, err := parseKey(r)
	if err != nil {
		refuse(w, err)
		return
	}
	p.write(w, "history", p.m.history(k, p.o.Now()))
}

func (m *mirror) history(k endpoint.Key, now time.Time) historyView {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v := historyView{Key: k.String(), Size: len(m.hist.buf), Held: m.hist.held(), Since: m.hist.complete(),
		Back: "../ui" + filter{Service: k.Service, Cluster: k.Cluster}.query()}
	if r := m.rows.get(k); r != nil {
		cur := endpointView(r, now)
		v.Current = &cur
	}
	for _, e := range m.hist.of(k) {
		v.Events = append(v.Events, historyRow{At: e.At, Version: e.Version, Type: e.Type.String(), Node: e.Node,
			TTL: e.TTL.String(), Priority: e.Priority, Weight: e.Weight, Annotations: e.Annotations})
	}
	return v
}
