// Package check runs the health checks of the agent's manifest — HTTP, TCP, gRPC
// health protocol and exec — and turns their results into a healthy/unhealthy state
// with rise and fall thresholds.
//
// The publish gate (docs/agent.md: "every health check returned OK")
// consults that state: see package agent.
package check
