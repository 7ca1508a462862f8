package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

// median of one measure across runs.
func median(rs []result, f func(result) time.Duration) time.Duration {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = f(r)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func writeTable(w io.Writer, c options, rs []result) {
	conns := "one gRPC connection per node"
	if c.conns > 0 {
		conns = fmt.Sprintf("%d shared gRPC connections", c.conns)
	}
	fmt.Fprintf(w, "%d data-plane controllers (memdp) in %d groups, star topology (hub %s), one wildcard name "+
		"announced by one node of every group; %s store, %d reconciler workers per queue, %s; GOMAXPROCS %d. "+
		"Median of %d runs, each from an empty control plane; times from the first node's start.\n\n",
		c.nodes, c.groups, groupName(0), c.store, c.workers, conns, runtime.GOMAXPROCS(0), len(rs))
	fmt.Fprintln(w, "| measure | median | runs |")
	fmt.Fprintln(w, "|---|---|---|")
	row := func(name string, f func(result) time.Duration) {
		all := ""
		for i, r := range rs {
			if i > 0 {
				all += ", "
			}
			all += ms(f(r))
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", name, ms(median(rs, f)), all)
	}
	row("last registration", func(r result) time.Duration { return r.lastRegistration })
	row("every link Applied and claimed", func(r result) time.Duration { return r.linksApplied })
	row("every link and route Applied", func(r result) time.Duration { return r.routesApplied })
	row("**from the last registration until every link and route is Applied** (goal ≤ 5 s)", result.afterRegistration)
	ok := median(rs, result.afterRegistration) <= 5*time.Second
	verified := true
	for _, r := range rs {
		verified = verified && r.verified == nil
	}
	fmt.Fprintf(w, "\n%d links and %d routes per run; goal %s; every run's datapaths matched the store exactly: %v.\n",
		rs[0].links, rs[0].routes, map[bool]string{true: "met", false: "MISSED"}[ok], verified)
}

// runScenarios runs each scenario on each store, c.runs times, and prints one table
// row per run.
func runScenarios(c options) error {
	var ms []measure
	for _, sc := range strings.Split(c.scenarios, ",") {
		if strings.TrimSpace(sc) == "ha" { // always on etcd
			for range c.runs {
				ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
				ms = append(ms, haRun(ctx, c)...)
				cancel()
			}
			continue
		}
		for _, st := range strings.Split(c.stores, ",") {
			if st != "memory" && st != "sqlite" {
				return fmt.Errorf("unknown store %q", st)
			}
			for range c.runs {
				ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
				got := runScenario(ctx, c, strings.TrimSpace(sc), st)
				cancel()
				for _, m := range got {
					if m.failed != nil {
						fmt.Fprintf(os.Stderr, "%s/%s: FAILED: %v\n", m.scenario, m.store, m.failed)
					}
				}
				ms = append(ms, got...)
			}
		}
	}
	return report(c, func(w io.Writer) { writeScenarioTable(w, c, ms) })
}

// report writes a table to stdout and, with -out, to that file too.
func report(c options, write func(io.Writer)) error {
	var w io.Writer = os.Stdout
	var sb strings.Builder
	if c.out != "" {
		w = io.MultiWriter(os.Stdout, &sb)
	}
	write(w)
	if c.out != "" {
		return os.WriteFile(c.out, []byte(sb.String()), 0o644)
	}
	return nil
}

var scenarioText = map[string]string{
	"names":         "star, one distinct name announced per group: announcements → all Applied",
	"mesh":          "full mesh `* ↔ *`, every node announces one shared name: announcements → all Applied",
	"crash":         "full mesh, one node per group (10%) crashes and reconnects → all Applied again",
	"restart":       "API mode, star with a name per group; the control plane restarts on the same address and SQLite file → all Applied, one connection per link",
	"ha-takeover":   "two replicas on a 3-member etcd, star with a name per group; the leader is SIGKILLed → the standby leads",
	"ha-reconverge": "the same → every node registered with the new leader, every link and route Applied",
}

func writeScenarioTable(w io.Writer, c options, ms []measure) {
	fmt.Fprintln(w, "| scenario | nodes / groups | store | converged | goal | last announcement stored | CPU (process) | ConfigCommands | links | routes | CP heap | load 1 min (before → after) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range ms {
		conv := ms1(m.converge)
		switch {
		case m.failed != nil:
			conv = "**failed**: " + m.failed.Error()
		case m.verified != nil:
			conv += " (**datapaths differ from the store**)"
		case m.converge <= m.goal:
			conv = "**" + conv + "**"
		}
		stored := "–"
		if m.scenario != "crash" {
			stored = ms1(m.lastStored)
		}
		fmt.Fprintf(w, "| %s | %d / %d | %s | %s | ≤ %s | %s | %.1f s | %d | %d | %d | %.0f MiB | %s |\n",
			scenarioText[m.scenario], m.nodes, m.groups, m.store, conv, m.goal, stored, m.cpu.Seconds(), m.commands,
			m.links, m.routes, float64(m.heapCP)/(1<<20), m.load)
	}
	fmt.Fprintf(w, "\n%d reconciler workers per queue, %s; GOMAXPROCS %d, %d CPUs, %s. CPU is the whole benchmark process "+
		"(control plane and every data-plane controller); CP heap is the live heap that stopping the control plane frees.\n",
		c.workers, connsText(c), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
}

func ms1(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}

func connsText(c options) string {
	if c.conns > 0 {
		return fmt.Sprintf("%d shared gRPC connections", c.conns)
	}
	return "one gRPC connection per node"
}
