// Package mirror keeps a local copy of a registry's endpoints for the agent's
// templates and file_sd output (docs/agent.md, "The agent's copy of the registry").
//
// It follows the registry's change feed where the backend has one (registry.Watcher):
// the initial Added events and the Synced marker build the copy, later events keep it
// current. Backends without a feed are polled with List. Either way the last known
// good copy is served while the backend is unreachable, and the mirror reconnects
// with capped exponential backoff and full jitter for as long as it runs.
package mirror
