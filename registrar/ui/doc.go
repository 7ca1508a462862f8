// Package ui is the registrar's read-only web page, served at /ui on its health
// port (beside /healthz, /readyz and /metrics): the services and endpoints of the
// registrar's snapshot, grouped by cluster, each endpoint's recent history, the
// open watch streams and how far each is behind, the backend's sync and write
// queue, and the other clusters the backend holds. A plain GET form filters by
// service, cluster and node. See docs/registrar.md, "Web page".
//
// The page keeps a mirror of its own (mirror.go): it loads the registrar's
// endpoints once, then follows its changes every 100 ms through the public
// introspection API (package registrar/inspect), and renders from the mirror,
// so a page view never takes the registrar's locks and costs the fan-out
// nothing. Pages are rendered on the server and read without JavaScript; the
// shared live.js (internal/webui) swaps in a fresh rendering when /ui/events
// says something changed. One rendering per filter and version serves every
// viewer. Everything the page needs is embedded; nothing user-supplied reaches
// the page but through html/template, and every query parameter is checked
// (query.go).
//
// It must not import gRPC or anything of the registrar beyond package
// registrar/inspect: the registrar imports it to mount it, and what the page
// may know of the registrar is what that API offers (a test checks the imports).
package ui
