// Command controlplane benchmarks control-plane convergence at fleet scale: N
// in-process data-plane controllers over memdp, spread over G groups, against an
// in-process control plane on loopback gRPC.
//
// The default scenario, startup, starts every node at once in a star topology with one
// wildcard name announced in every group, and reports the time from the last node's
// registration until every link and route is Applied, with the phases before it. The
// others (-scenarios names,mesh,crash,restart) let a fleet's links converge first and then time
// one event until everything is Applied again: names (star, a name of its own
// announced in every group), mesh (every group linked to every other, every node
// announcing one shared name) and crash (after mesh, one node of every group crashes
// and reconnects). They print one table row per run with the CPU time, the
// ConfigCommands sent, the control plane's heap and the load average.
//
//	go run ./bench/controlplane -nodes 1000 -groups 100 -store memory
//	go run ./bench/controlplane -scenarios names,crash -stores memory,sqlite -runs 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/pprof"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
)

type options struct {
	nodes, groups, workers, conns, runs int
	store, out, cpuProfile              string
	eventProfile, heapProfile           string
	scenarios, stores                   string
	timeout                             time.Duration
	baseDelay                           time.Duration
	leaseTTL                            time.Duration // ha
	fsync                               bool          // ha: etcd fsyncs
	maxTxnOps                           int           // ha: etcd's --max-txn-ops
}

func main() {
	if path := os.Getenv(childEnv); path != "" { // a control-plane replica of the ha scenario
		os.Exit(childCP(path))
	}
	var c options
	flag.IntVar(&c.nodes, "nodes", 1000, "data-plane nodes")
	flag.IntVar(&c.groups, "groups", 100, "groups the nodes are spread over (the first is the hub)")
	flag.IntVar(&c.workers, "workers", 4, "reconciler workers per queue")
	flag.IntVar(&c.conns, "conns", 0, "gRPC client connections the nodes share (0: one per node)")
	flag.IntVar(&c.runs, "runs", 3, "repetitions (each from an empty control plane); the median is reported")
	flag.StringVar(&c.store, "store", "memory", "control plane store: memory or sqlite")
	flag.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up a run after this long")
	flag.DurationVar(&c.baseDelay, "base-delay", 200*time.Millisecond, "reconciler base retry delay")
	flag.StringVar(&c.out, "out", "", "also write the markdown table to this file")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	flag.StringVar(&c.eventProfile, "eventprofile", "", "write a CPU profile of the timed events alone (names, mesh, crash) to this file")
	flag.StringVar(&c.heapProfile, "heapprofile", "", "write heap profiles before (FILE.before) and after each timed event, "+
		"for pprof -diff_base: the event's allocations, and what is live once it converged")
	flag.StringVar(&c.scenarios, "scenarios", "startup", "comma-separated: startup (every node starts at once), "+
		"names (star, a name of its own per group), mesh (* <-> *, every node announces one name), "+
		"crash (mesh, then one node per group crashes and reconnects), "+
		"restart (API mode, names, then the control plane restarts on the same address and database), "+
		"ha (names on two replicas over a 3-member etcd, then the leader is SIGKILLed)")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", config.DefaultLeaseTTL, "ha: the election lease")
	flag.IntVar(&c.maxTxnOps, "max-txn-ops", 100000, "ha: etcd's --max-txn-ops (its default is 128)")
	flag.BoolVar(&c.fsync, "fsync", false, "ha: etcd fsyncs its log (off: the etcd members share this machine's disk)")
	flag.StringVar(&c.stores, "stores", "", "comma-separated stores for the names, mesh, crash and restart scenarios (default: -store)")
	flag.Parse()
	if c.stores == "" {
		c.stores = c.store
	}
	if c.nodes < c.groups || c.groups < 2 || c.runs < 1 || c.workers < 1 || (c.store != "memory" && c.store != "sqlite") {
		fmt.Fprintln(os.Stderr, "need nodes >= groups >= 2, runs >= 1, workers >= 1, store memory or sqlite")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		log.Fatal(err)
	}
}

func run(c options) error {
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.scenarios != "startup" {
		return runScenarios(c)
	}
	var results []result
	for i := range c.runs {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		r, err := once(ctx, c)
		cancel()
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Fprintf(os.Stderr, "run %d: %s\n", i+1, r)
		results = append(results, r)
	}
	return report(c, func(w io.Writer) { writeTable(w, c, results) })
}
