// Package webui holds what Switchboard's read-only web pages share: one style sheet,
// one live-update script and the response headers that keep a page to its own
// assets. The control plane's status page, the registrar's page and the agent's
// page use it, so they look and behave alike.
//
// Pages are rendered on the server and read without JavaScript. live.js, when it
// runs, keeps the page's live part current: it fetches the server's fresh rendering
// of it (the page's own query string kept) when the page's event stream says
// something changed, and at least every refresh interval.
//
// It must not import any other Switchboard package: it is a leaf every page uses.
package webui
