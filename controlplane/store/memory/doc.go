// Package memory is the in-memory control plane store: the default, losing all state
// on restart (docs/controlplane.md, "Configuration Reference", database
// in_memory).
package memory
