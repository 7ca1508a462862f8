// Package atomicfile writes generated files (rendered templates, Prometheus file_sd)
// so that a reader never sees a half-written file and an unchanged file is never
// touched: consumers such as Prometheus or a reload command react to writes.
//
// It serves the agent's outputs (docs/agent.md, "Templates" and "Prometheus
// file_sd").
package atomicfile
