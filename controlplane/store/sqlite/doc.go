// Package sqlite is the persistent control plane store on SQLite (modernc.org/sqlite, no
// cgo), in WAL mode with versioned schema migrations. It is what API mode needs to keep
// segments across restarts (docs/controlplane.md, "Configuration Reference").
package sqlite
