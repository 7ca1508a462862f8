// Package agent is Switchboard's per-node agent (docs/agent.md): registration as a
// side effect of health, and discovery outputs kept current from the registry.
//
//   - Registration as a side effect of health ("The publish gate"): an Agent publishes
//     the entries of its manifest (package manifest) while their health checks
//     (package check) pass, keeps them alive by re-publishing before their TTL runs
//     out, removes them when a check fails, and removes what it registered on
//     shutdown. Other sources feed it entries through the same gate (SetSource): the
//     node's Kubernetes pods (package pods), held while not Ready and kept across the
//     agent's restarts. Without a registry backend it runs with a no-op publisher ("A
//     missing registration publisher is tolerated, not fatal").
//   - Lookup from templates and Prometheus file_sd ("From a template", "Prometheus"):
//     a Discovery mirrors the registry (package mirror) and keeps rendered files
//     (package render) and file_sd files (package filesd) current.
//
// Run wires both together with metrics, /healthz and the agent's read-only page at
// /ui (package ui, fed by inspect.go); `switchboard agent` calls it.
package agent
