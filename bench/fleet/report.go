package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/switchboard-mesh/switchboard/bench/internal/hostspeed"
)

// probeHost reads the host's speed; on a shared machine the same run can be twice
// as fast in one half-hour as in the next.
func probeHost(log *slog.Logger) string {
	r, err := hostspeed.Measure()
	if err != nil {
		log.Warn("host speed probe failed", "err", err)
		return "unknown"
	}
	return r.String()
}

// loadAvg is the one-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// writeReport prints the table to stdout and to -out; it reports whether every
// figure with a goal met it.
func writeReport(o options, rows []row, before, after string) (bool, error) {
	var b strings.Builder
	met := report(&b, o, rows, before, after)
	fmt.Print(b.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			return met, err
		}
	}
	return met, nil
}

func report(w io.Writer, o options, rows []row, before, after string) bool {
	fmt.Fprintf(w, "### bench/fleet: %s, %d clusters × %d registrars × %d endpoints, TTL %s, liveness TTL %s, hold %s\n\n",
		o.backend, o.clusters, o.registrars, o.endpoints, o.ttl, o.livenessTTL, o.hold)
	fmt.Fprintf(w, "| Phase | Figure | Value | Goal met | How it is counted | Load avg |\n|---|---|---|---|---|---|\n")
	allMet := true
	for _, r := range rows {
		met := ""
		if r.ok != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.ok]
			allMet = allMet && *r.ok
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.phase, r.figure, r.value, met, r.how, r.load)
	}
	fmt.Fprintf(w, "\nRun: `go run ./bench/fleet -backend %s -clusters %d -registrars %d -endpoints %d -per-agent %d -conns %d -ttl %s -liveness-ttl %s -hold %s -settle %s -duration %s -changes %d -loss-window %s -member %s -phases %s` on %d CPUs, %s, %s.\n",
		o.backend, o.clusters, o.registrars, o.endpoints, o.perAgent, o.conns, o.ttl, o.livenessTTL, o.hold, o.settle, o.duration, o.changes, o.lossWindow, o.member,
		strings.Join(o.phases, ","), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Loss windows: %s after a replica's kill, %s after a member's.\n", o.lossWindow, o.memberWindow)
	fmt.Fprintf(w, "Host before: %s; after: %s.\n", before, after)
	return allMet
}
