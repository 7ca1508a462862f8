// Package statuspage is the control plane's read-only status page, served on the
// same HTTP port as /metrics: groups and their nodes (those that do not answer the
// control plane marked), the segments' group pairs (those waiting for a group's
// first node marked), links and routes by state, and the reconcilers' recent
// errors. The page is rendered on the server (it reads without JavaScript); a small
// script fetches a fresh rendering every few seconds, so an open page follows the
// fabric live. Its assets are embedded: the page needs no network beyond the control
// plane. /status/state.json serves the same picture as JSON for tools. See
// docs/controlplane.md, "Status page".
package statuspage
