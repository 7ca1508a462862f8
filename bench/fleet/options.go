package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// options are the program's flags.
type options struct {
	backend    string
	clusters   int
	registrars int
	endpoints  int
	perAgent   int
	conns      int
	ttl        time.Duration
	duration   time.Duration
	settle     time.Duration
	changes    int
	lossWindow time.Duration
	// memberWindow is the loss window of the member phase: longer after an etcd
	// leader's loss (see withDefaults).
	memberWindow time.Duration
	member       string
	phases       []string
	out          string
	timeout      time.Duration
	keep         bool
	livenessTTL  time.Duration
	hold         string
}

var allPhases = []string{"steady", "propagation", "replica", "member"}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var phases string
	fs.StringVar(&o.backend, "backend", "etcd", "shared registry backend: etcd (3 members) or jetstream (3 nodes, stream at R3)")
	fs.IntVar(&o.clusters, "clusters", 2, "clusters sharing the backend; each has its own registrars and agents process")
	fs.IntVar(&o.registrars, "registrars", 2, "registrar replicas per cluster, each a process")
	fs.IntVar(&o.endpoints, "endpoints", 2000, "endpoints registered in each cluster")
	fs.IntVar(&o.perAgent, "per-agent", 10, "endpoints per simulated agent (one node's pods): an agent publishes its entries in one batch")
	fs.IntVar(&o.conns, "conns", 0, "registrar connections shared by a cluster's simulated agents; 0: 2 per replica")
	fs.DurationVar(&o.ttl, "ttl", 30*time.Second, "TTL of every registration; agents refresh each entry every TTL/3, as the real agent does")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "steady-state window over which backend writes are counted")
	fs.DurationVar(&o.settle, "settle", 0, "wait after registration before the steady window; 0: TTL/3, one full refresh period")
	fs.IntVar(&o.changes, "changes", 20, "changes written in cluster c1 to time cross-cluster propagation")
	fs.DurationVar(&o.lossWindow, "loss-window", 0, "how long to watch for lost entries after a kill; 0: TTL+10s, enough for an unrefreshed entry to expire (2×TTL+TTL/10+10s after an etcd leader's loss)")
	fs.StringVar(&o.member, "member", "leader", "backend member to kill in the member phase: leader (etcd leader; the stream leader on JetStream) or follower")
	fs.StringVar(&phases, "phases", strings.Join(allPhases, ","), "phases to run, comma-separated, in this order: "+strings.Join(allPhases, ", "))
	fs.StringVar(&o.out, "out", "", "also write the markdown report to this file")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "deadline of the whole run; children are killed when it passes")
	fs.DurationVar(&o.livenessTTL, "liveness-ttl", 20*time.Second, "registrars keep their agents' entries alive while the agents' streams are open, writing each once (on backends with holds); 0: every refresh reaches the backend, as before")
	fs.StringVar(&o.hold, "hold", "all", "what each registrar keeps: all (every cluster's endpoints) or demanded (its cluster's and the services its watchers ask for)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (children's logs, data) instead of removing it")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fleet [flags]\n\nMeasures a fleet of registrar clusters on one shared backend (see the package comment).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.phases, err = parsePhases(phases); err != nil {
		return o, err
	}
	return o.withDefaults()
}

// parsePhases checks the names and puts them in the order they run in: each phase
// leaves the fleet as the next expects it (the member phase last: it leaves the
// backend one member short).
func parsePhases(s string) ([]string, error) {
	want := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allPhases, p) {
			return nil, fmt.Errorf("unknown phase %q: want some of %s", p, strings.Join(allPhases, ","))
		}
		want[p] = true
	}
	if len(want) == 0 {
		return nil, errors.New("no phase to run")
	}
	var out []string
	for _, p := range allPhases {
		if want[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

func (o options) withDefaults() (options, error) {
	switch {
	case o.backend != "etcd" && o.backend != "jetstream":
		return o, fmt.Errorf("-backend %q: want etcd or jetstream", o.backend)
	case o.clusters < 1 || o.registrars < 1 || o.endpoints < 1 || o.perAgent < 1:
		return o, errors.New("-clusters, -registrars, -endpoints and -per-agent must be at least 1")
	case o.ttl < 3*time.Second:
		return o, fmt.Errorf("-ttl %s: at least 3s (the backends keep TTLs in seconds)", o.ttl)
	case o.member != "leader" && o.member != "follower":
		return o, fmt.Errorf("-member %q: want leader or follower", o.member)
	case o.hold != "all" && o.hold != "demanded":
		return o, fmt.Errorf("-hold %q: want all or demanded", o.hold)
	case o.duration <= 0 || o.timeout <= 0:
		return o, errors.New("-duration and -timeout must be positive")
	}
	if o.conns == 0 {
		o.conns = 2 * o.registrars
	}
	if o.settle == 0 {
		o.settle = o.ttl / 3
	}
	o.memberWindow = o.lossWindow
	if o.lossWindow == 0 {
		o.lossWindow = o.ttl + 10*time.Second
		o.memberWindow = o.lossWindow
		if o.backend == "etcd" && o.member == "leader" {
			// A new etcd leader extends every lease by its full TTL, so an entry whose
			// refresh was lost in the failover expires up to TTL+bucket later than
			// it would have (registry/etcd's doc.go).
			o.memberWindow = 2*o.ttl + o.ttl/10 + 10*time.Second
		}
	}
	return o, nil
}

func (o options) has(phase string) bool { return slices.Contains(o.phases, phase) }
