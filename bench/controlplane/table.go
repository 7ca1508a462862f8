package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
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
