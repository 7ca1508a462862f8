// Package memory is the in-memory control plane store: the default, losing all state
// on restart (../shared/spec/control-plane.md, "Configuration Reference", database
// in_memory).
package memory
