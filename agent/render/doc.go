// Package render renders Go text/template files over the registry's endpoints —
// lookup from templates (docs/agent.md, "Templates": the
// registrations(cluster, protocol, service, ip) function) — and keeps the rendered
// files up to date: written atomically, only when the content changed, with an
// optional command run after each change (like consul-template's reload command).
//
// A template that fails, to parse or to execute, never replaces the output: the
// error names the file and line, and the last good output stays in place.
package render
