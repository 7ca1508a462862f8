// Package ui is the agent's read-only web page, served at /ui on the agent's HTTP
// port beside /metrics (docs/agent.md, "Web page"): the entries and the state of
// each health check (counters, last output, recent results), the publish gate,
// the rendered files, the discovery servers' clients and the registrar connection.
//
// It owns the page only: its templates, its query validation, its event stream and
// the JSON view /ui/state.json. What it shows comes from a Source, which the agent
// satisfies (agent/inspect.go) and tests fake; the page never reaches into the
// agent. It must not import the gRPC servers (agent/xds, the registrar) nor mutate
// agent state: it reads a State and renders it, through html/template, so nothing a
// check's output or a query holds reaches the page unescaped.
//
// The page is rendered on the server and reads without JavaScript. With it,
// internal/webui's live.js keeps the page current: the event stream /ui/events
// sends a message for each change of the Source's version (coalesced), and the
// script fetches /ui/fragment again.
package ui
