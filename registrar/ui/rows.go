package ui

import (
	"html/template"
	"strconv"
	"strings"
)

// esc escapes text for an HTML element or a quoted attribute value: the five
// characters that could end either (& < > " ').
var esc = template.HTMLEscapeString

// renderTables writes v's endpoint and watcher rows into v, every value escaped
// (see the comment in page.go for why not by a template).
func renderTables(v *view) {
	for i := range v.Endpoints.Groups {
		g := &v.Endpoints.Groups[i]
		var b strings.Builder
		for _, r := range g.Rows {
			endpointRowHTML(&b, &r)
		}
		g.HTML = template.HTML(b.String()) // every value escaped above
	}
	var b strings.Builder
	for i := range v.Watchers.Rows {
		watcherRowHTML(&b, &v.Watchers.Rows[i])
	}
	v.Watchers.HTML = template.HTML(b.String()) // every value escaped above
}

// endpointRowHTML writes one endpoint's row. Its history link is built by
// historyLink from query-escaped values, a relative URL.
func endpointRowHTML(b *strings.Builder, r *endpointRow) {
	b.WriteString(`<tr data-key="`)
	b.WriteString(esc(r.Key))
	b.WriteString(`" data-service="`)
	b.WriteString(esc(r.Service))
	b.WriteString("\">\n")
	cell(b, "", r.Service)
	cell(b, ` class="mono"`, r.HostPort)
	cell(b, "", r.Protocol)
	cell(b, "", r.Node)
	cell(b, "", r.Place)
	healthCell(b, r.Health)
	cell(b, ` title="first seen by this page at `+esc(r.Seen)+`"`, r.Age)
	cell(b, "", r.TTLText)
	cell(b, "", r.Weights)
	b.WriteString(`<td><a href="`)
	b.WriteString(esc(r.History))
	b.WriteString("\">history</a></td>\n</tr>\n")
}

// watcherRowHTML writes one watcher's row; a lagging one has the class "lag".
func watcherRowHTML(b *strings.Builder, w *watcherRow) {
	lag := strconv.FormatUint(w.Lag, 10)
	b.WriteString(`<tr data-watcher="`)
	b.WriteString(strconv.FormatUint(w.ID, 10))
	b.WriteString(`" data-node="`)
	b.WriteString(esc(w.Node))
	b.WriteString(`" data-lag="`)
	b.WriteString(lag)
	b.WriteString(`"`)
	if w.Lagging {
		b.WriteString(` class="lag"`)
	}
	b.WriteString(">\n")
	if w.Node == "" {
		b.WriteString(`<td><span class="empty">unnamed</span></td>`)
	} else {
		cell(b, "", w.Node)
	}
	cell(b, "", w.Cluster)
	cell(b, "", w.Scope)
	if w.Snapshot {
		lag = "taking a snapshot"
	}
	cell(b, "", lag)
	cell(b, "", strconv.Itoa(w.Resumes))
	cell(b, ` class="mono"`, w.Peer)
	age := w.Age
	if w.Resumed {
		age += " (resumed)"
	}
	cell(b, "", age)
	b.WriteString("\n</tr>\n")
}

// cell writes <td attrs>text</td>, text escaped; attrs are the caller's own
// markup, its values escaped by the caller.
// healthCell writes the health; a state other than healthy is marked, as a
// lagging watcher is, so that a draining endpoint stands out.
func healthCell(b *strings.Builder, h string) {
	if h == "healthy" {
		cell(b, "", h)
		return
	}
	cell(b, ` class="lag"`, h)
}

func cell(b *strings.Builder, attrs, text string) {
	b.WriteString("<td")
	b.WriteString(attrs)
	b.WriteString(">")
	b.WriteString(esc(text))
	b.WriteString("</td>")
}
