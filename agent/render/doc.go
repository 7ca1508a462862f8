// Package render renders Go text/template files over the registry's endpoints —
// lookup from templates (docs/agent.md, "Templates": the
// registrations(cluster, protocol, service, ip) function) — and keeps the rendered
// files up to date: written atomically, only when the content changed, with an
// optional command run after each change (like consul-template's reload command).
//
// A template that fails, to parse or to execute, never replaces the output: the
// error names the file and line, and the last good output stays in place.
//
// Values written by other nodes are untrusted: no value read from the registry may
// change the structure of a rendered file. Our own writes refuse control characters
// (endpoint.Validate), but entries another writer stored are read as they are
// (endpoint.ValidateRead), so a node or annotation value may hold a newline that
// would end a line of nginx config and start a block of its own. Such a value reaches
// templates only as a stand-in that prints nothing (refuse.go): a rendering that
// would print it is done again without the value's endpoint, which is reported as a
// Refusal, and the file stays current for every other endpoint. Failing the rendering
// instead would let one node freeze the file on every other. The template may ask
// for the value as stored with raw, or have it written escaped by the helpers
// (helpers.go): quote, json, shellquote, nginx and haproxy.
package render
