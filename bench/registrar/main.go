package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/switchboard-mesh/switchboard/bench/internal/hostspeed"
)

type options struct {
	scenarios      string
	fsync          bool
	etcdProcess    bool
	out            string
	endpoints      int
	watchers       int
	conns          int
	registrations  int
	interval       time.Duration
	snapshotLarge  int
	stormWatchers  int
	bigWatchers    int
	bigConns       int
	batchClients   int
	batchEndpoints int
	agents         int
	cpuprofile     string
	memprofile     string
	fanoutTrace    string
}

// result is one row of the report.
type result struct {
	scenario, setup, value, goal, anchor string
	ok                                   *bool
	load                                 string // the machine's load average while it ran
}

// scopedFlag is the scoped scenario's child's -scoped; tokenFlag the fan-out
// child's -token.
var (
	scopedFlag bool
	tokenFlag  string
	// wayFlag is the list scenario's child's -way: how it lists.
	wayFlag string
	// etcdDirFlag is the etcd child's -etcd-dir: its data directory.
	etcdDirFlag string
	// childProfile is -child-cpuprofile: the watcher children's -cpuprofile.
	childProfile string
	// syncInterval is -sync-interval: how often the registrars list the whole backend,
	// with and without a live change feed (0: the registrar's defaults). At 100,000
	// endpoints each list is a full listing from etcd, which in this bench runs on
	// the same two cores.
	syncInterval time.Duration
)

func main() {
	var o options
	var role, target string
	flag.StringVar(&o.scenarios, "scenarios", "memory,fanout,fanout10k,snapshot,storm,storm10k,batching,read,list,direct", "comma-separated scenarios to run")
	flag.BoolVar(&o.fsync, "fsync", true, "run etcd with fsync (realistic write latency)")
	flag.BoolVar(&o.etcdProcess, "etcd-process", false, "run etcd as a process of its own (this program again, serving an embedded etcd) instead of inside the bench's process, which also holds the registrars")
	flag.StringVar(&o.out, "out", "", "write the Markdown report here (default: stdout only)")
	flag.IntVar(&o.endpoints, "endpoints", 10000, "endpoints in the registrar for fanout, memory and storm")
	flag.IntVar(&o.watchers, "watchers", 1000, "watching streams for fanout and memory")
	flag.IntVar(&o.conns, "conns", 10, "client connections the watchers share")
	flag.IntVar(&o.registrations, "registrations", 1000, "registrations timed by fanout and fanout10k (20 s at -interval 20ms: the p99 is the 10th-worst)")
	flag.DurationVar(&o.interval, "interval", 20*time.Millisecond, "time between fanout registrations")
	flag.StringVar(&o.fanoutTrace, "fanout-trace", "", "write each fan-out registration's start (seconds after the first) and latency (ms) here, a line each, then the registrar process's garbage collections as \"# gc S\" lines, to see when the slow ones come and what they meet (fanout10k overwrites fanout's)")
	flag.IntVar(&o.snapshotLarge, "snapshot-endpoints", 100000, "endpoints of the large snapshot")
	flag.IntVar(&o.stormWatchers, "storm-watchers", 1000, "watchers in the reconnect storm")
	flag.IntVar(&o.bigWatchers, "big-watchers", 10000, "watchers of fanout10k and storm10k (over -snapshot-endpoints endpoints)")
	flag.IntVar(&o.bigConns, "big-conns", 100, "connections of fanout10k and storm10k")
	flag.IntVar(&o.batchClients, "batch-clients", 100, "clients in the write burst")
	flag.IntVar(&o.batchEndpoints, "batch-endpoints", 1000, "registrations in the write burst, spread over the clients")
	flag.IntVar(&o.agents, "agents", 200, "agents in the direct-versus-registrar comparison")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run here")
	flag.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile of the whole run here")
	flag.StringVar(&role, "role", "bench", "internal: bench, or the child of a scenario (watchers, fanout-watchers, lister, ...)")
	flag.BoolVar(&scopedFlag, "scoped", false, "internal: whether the scoped scenario's child watches its services only")
	flag.StringVar(&target, "target", "", "internal: registrar address for -role watchers")
	flag.StringVar(&tokenFlag, "token", "", "internal: the version the fan-out child's watchers resume from")
	flag.DurationVar(&syncInterval, "sync-interval", 0, "the registrars' SyncInterval and BackstopInterval: how often they list the whole backend (0: the registrar's defaults, 5s without a live change feed, 1m with one)")
	flag.StringVar(&etcdDirFlag, "etcd-dir", "", "internal: the etcd child's data directory")
	flag.StringVar(&wayFlag, "way", "", "internal: how the list scenario's child lists (undecoded, generated or client)")
	flag.StringVar(&childProfile, "child-cpuprofile", "", "write a CPU profile of the watchers' child process here")
	flag.DurationVar(&slowWindow, "slow-window", slowWindow, "slowbackend: how long backend writes are slowed, and the length of the unslowed window compared with it")
	transport.register(flag.CommandLine)
	flag.Parse()
	fatalIf(transport.check())
	if role != "bench" {
		stop, err := startCPUProfile(o.cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		defer stop()
	}
	switch role {
	case "watchers":
		fatalIf(watcherProcess(target, o.watchers, o.conns))
	case "scoped-agents":
		fatalIf(scopedAgents(target, o.agents, scopedFlag))
	case "scoped-fanout":
		fatalIf(scopedFanoutWatchers(target, o.watchers, o.conns, o.registrations, scopedFlag))
	case "fanout-watchers":
		fatalIf(fanoutWatchers(target, o.watchers, o.conns, o.registrations, tokenFlag))
	case "storm-watchers":
		fatalIf(stormWatchers(target, o.watchers, o.conns))
	case "etcd":
		fatalIf(etcdChild(etcdDirFlag, o.fsync))
	case "lister":
		fatalIf(listerProcess(target, o.endpoints, wayFlag))
	case "restart-watchers":
		fatalIf(restartWatchers(target, o.watchers, o.conns, tokenFlag))
	case "page-viewer":
		fatalIf(pageViewer(target))
	default:
		fatalIf(run(o))
	}
}

// fatalIf ends the program on err, after the deferred profile is written.
func fatalIf(err error) {
	if err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

// startCPUProfile profiles the process into path until stop; no path, no profile.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func run(o options) error {
	ctx := context.Background()
	stop, err := startCPUProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer stop()
	e, err := newEnv(ctx, o.fsync, o.etcdProcess)
	if err != nil {
		return err
	}
	defer e.close()
	all := map[string]func() ([]result, error){
		"fanout": func() ([]result, error) {
			return fanout(ctx, e, o, fanoutCase{watchers: o.watchers, conns: o.conns, endpoints: o.endpoints, goal: 10 * time.Millisecond, anchor: "76 ms"})
		},
		"fanout10k": func() ([]result, error) {
			return fanout(ctx, e, o, fanoutCase{watchers: o.bigWatchers, conns: o.bigConns, endpoints: o.snapshotLarge, resume: true, goal: 50 * time.Millisecond})
		},
		"memory": func() ([]result, error) { return idleMemory(ctx, e, o) },
		"snapshot": func() ([]result, error) {
			small, err := snapshotScenario(ctx, e, 10000, 0, "55 ms")
			if err != nil {
				return nil, err
			}
			large, err := snapshotScenario(ctx, e, o.snapshotLarge, 50*time.Millisecond, "636 ms")
			return append(small, large...), err
		},
		"storm": func() ([]result, error) { return storm(ctx, e, o.stormWatchers, o.conns, o.endpoints, 0) },
		"storm10k": func() ([]result, error) {
			return storm(ctx, e, o.bigWatchers, o.bigConns, o.snapshotLarge, 10*time.Second)
		},
		"restart": func() ([]result, error) {
			return restart(ctx, e, restartCase{o.stormWatchers, o.conns, o.endpoints, false, 0})
		},
		"restart10k": func() ([]result, error) {
			return restart(ctx, e, restartCase{o.bigWatchers, o.bigConns, o.snapshotLarge, true, 10 * time.Second})
		},
		"batching": func() ([]result, error) { return batching(ctx, e, o) },
		"read":     func() ([]result, error) { return cachedRead(ctx, e) },
		"list":     func() ([]result, error) { return listAll(ctx, e, o) },
		"direct":   func() ([]result, error) { return directVsRegistrar(ctx, e, o) },
		"scoped":   func() ([]result, error) { return scoped(ctx, e, o) },
		"page":     func() ([]result, error) { return pageScenario(ctx, e, o) },
		// slowbackend: not in the default set (it takes 70 s); slowbackend.go.
		"slowbackend": func() ([]result, error) { return slowBackendScenario(ctx, e, o) },
	}
	before, err := hostspeed.Measure()
	if err != nil {
		return err
	}
	var rows []result
	for _, name := range strings.Split(o.scenarios, ",") {
		fn, ok := all[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		start, loadBefore := time.Now(), loadAvg()
		r, err := fn()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range r {
			r[i].load = loadBefore + " → " + loadAvg()
		}
		log.Printf("%s done in %s", name, time.Since(start).Round(time.Millisecond))
		for _, row := range r {
			log.Printf("  %s: %s", row.scenario, row.value)
		}
		rows = append(rows, r...)
	}
	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
	}
	after, err := hostspeed.Measure()
	if err != nil {
		return err
	}
	host := [2]hostspeed.Reading{before, after}
	report(os.Stdout, o, rows, host)
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		report(f, o, rows, host)
	}
	return nil
}

// report writes the table, and how fast the host was before the first scenario
// and after the last (hostspeed): runs are comparable when those are.
func report(w io.Writer, o options, rows []result, host [2]hostspeed.Reading) {
	fmt.Fprintf(w, "| Scenario | Setup | Result | Goal | Anchor | Met | Load avg |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		met := ""
		if r.ok != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.ok]
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.scenario, r.setup, r.value, r.goal, r.anchor, met, r.load)
	}
	where := "embedded in the bench's process"
	if o.etcdProcess {
		where = "a process of its own (-etcd-process)"
	}
	fmt.Fprintf(w, "\nRun: `go run ./bench/registrar -scenarios %s` on %d CPUs, %s, etcd fsync %v, etcd %s, %s.\n",
		o.scenarios, runtime.NumCPU(), runtime.Version(), o.fsync, where, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(w, "Host before: %s; after: %s.\n", host[0], host[1])
}

// loadAvg is the one-minute load average: the machine is shared, and a busy
// neighbour shows in every latency.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
