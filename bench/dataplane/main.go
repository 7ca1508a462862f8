// Command dataplane benchmarks the reference data-plane node beside a NATS core
// anchor, in one run on one machine, with 1 KiB messages. Each scenario runs against
// both systems (-only picks one), each on a setup of its own:
//
//   - link: throughput (messages/s with at most -window messages in flight, so neither
//     system is pushed into dropping) and latency (p50 and p99 of publish-to-receive at a
//     paced -rate) from a publisher in group a to a subscriber in group b across one link
//     (client -> node a/n1 -> link -> node b/n1 -> client), against two embedded
//     nats-servers joined by a route (client -> server 1 -> route -> server 2 -> client);
//
//   - fanout: deliveries/s from one publisher to -fanout subscribers across the same
//     link (a broadcast for the node, a plain subject for NATS);
//
//   - hops: throughput and latency as for link, across two gateways: groups edge-a,
//     cloud and edge-b, two nodes each, edges linked to cloud in one segment (the shape
//     `switchboard dev` runs), publisher on edge-a's gateway, subscriber on edge-b's;
//     against two NATS clusters joined by a gateway (a super-cluster), or with
//     -nats-hops leaf a NATS hub and two leaf nodes (edge -> hub -> edge), or with
//     -nats-hops leaf-hub-pair a hub of two routed servers, a leaf on each (edge -> hub
//     1 -> hub 2 -> edge, the node's path when cloud's links are on different nodes);
//
//   - reqrep: requests/s with -requesters requests in flight, and p50/p99 of the round
//     trip at the paced -rate, from a requester at a/n1 (server 1) to a responder at
//     b/n1 (server 2);
//
//   - stall: deliveries/s of nine of ten subscribers of one name on the far side, all
//     ten reading, then with one that stops reading (and never unsubscribes); whether
//     the stalled one was cut off, and the drops the systems counted.
//
// It prints markdown, a section per scenario:
//
//	go run ./bench/dataplane
//	go run ./bench/dataplane -scenarios hops,reqrep -only node
//	go run ./bench/dataplane -messages 500000 -out docs/benchmarks/dataplane-run.md
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// scenarioNames are the scenarios in the order they run and print.
var scenarioNames = []string{"link", "fanout", "hops", "reqrep", "stall"}

type options struct {
	messages, size, window, rate, fanout, fanoutMessages int
	requests, requesters                                 int
	stallSubscribers, stallMessages                      int
	latencyFor, timeout                                  time.Duration
	out, cpuprofile, memprofile, only, natsHops          string
	scenarios                                            map[string]bool
}

func (o options) has(s string) bool { return o.scenarios[s] }

func main() {
	var o options
	var scenarios string
	flag.StringVar(&scenarios, "scenarios", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated: "+strings.Join(scenarioNames, ", "))
	flag.IntVar(&o.messages, "messages", 1000000, "messages per throughput run (link, hops)")
	flag.IntVar(&o.size, "size", 1024, "payload bytes")
	flag.IntVar(&o.window, "window", 4096, "messages in flight at most (throughput runs)")
	flag.IntVar(&o.rate, "rate", 2000, "messages/s (requests/s for reqrep) of the latency runs")
	flag.DurationVar(&o.latencyFor, "latency-for", 10*time.Second, "length of each latency run")
	flag.IntVar(&o.fanout, "fanout", 100, "subscribers of the fan-out runs")
	flag.IntVar(&o.fanoutMessages, "fanout-messages", 20000, "messages per fan-out run")
	flag.IntVar(&o.requests, "requests", 100000, "requests per reqrep throughput run")
	flag.IntVar(&o.requesters, "requesters", 8, "concurrent requesters (requests in flight) of the reqrep throughput run")
	flag.IntVar(&o.stallSubscribers, "stall-subscribers", 10, "subscribers of the stall runs, one of which stalls")
	flag.IntVar(&o.stallMessages, "stall-messages", 100000, "messages per phase of the stall runs (enough to fill the stalled one's buffers)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the whole run's limit")
	flag.StringVar(&o.out, "out", "", "also write the tables to this file")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the node's runs to this file (go tool pprof)")
	flag.StringVar(&o.memprofile, "memprofile", "", "write a profile of what the node's runs allocated to this file (go tool pprof -sample_index=alloc_space)")
	flag.StringVar(&o.only, "only", "", "run one system only: nats or node; or floor, with -scenarios link: two bare Go relays over TCP in place of a system, the least such a path costs on this host")
	flag.StringVar(&linkTransport, "link-transport", linkTransport, "the nodes' link transport: framed or grpc")
	flag.StringVar(&clientTransport, "client-transport", clientTransport, "the transport the bench's clients call the node's API on: framed or grpc")
	flag.StringVar(&o.natsHops, "nats-hops", "gateway", "NATS's shape for hops: gateway (two clusters joined by a gateway), leaf (a hub and two leaf nodes) or leaf-hub-pair (a hub of two routed servers, a leaf node on each)")
	flag.Parse()
	o.scenarios = map[string]bool{}
	for s := range strings.SplitSeq(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) {
			log.Fatalf("unknown scenario %q (want some of %s)", s, strings.Join(scenarioNames, ", "))
		}
		o.scenarios[s] = true
	}
	if len(o.scenarios) == 0 {
		log.Fatal("no scenario selected")
	}
	switch {
	case o.only != "" && o.only != "nats" && o.only != "node" && o.only != "floor":
		log.Fatalf("-only %q: want nats, node or floor", o.only)
	case o.only == "floor" && (len(o.scenarios) != 1 || !o.has("link")):
		log.Fatal("-only floor runs the link scenario only (-scenarios link)")
	}
	if natsHopShapes[o.natsHops] == nil {
		log.Fatalf("-nats-hops %q: want gateway, leaf or leaf-hub-pair", o.natsHops)
	}
	if o.stallSubscribers < 2 || o.requesters < 1 || o.rate < 1 || o.window < 1 {
		log.Fatal("-stall-subscribers must be at least 2, -requesters, -rate and -window at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// result is one system's figures.
type result struct {
	system string
	// link and fanout
	link        streamResult
	hasLink     bool
	fanout      fanoutResult
	hasFanout   bool
	linkDropped uint64
	// hops
	hops     streamResult
	hasHops  bool
	hopsPath string
	// reqrep
	reqrep    reqrepResult
	hasReqrep bool
	// stall
	stall    stallResult
	hasStall bool
	// load is the load average when each scenario ended.
	load map[string]string
}

// target is one system under test: a publisher and subscribers across one hop (or
// more: hops).
type target interface {
	name() string
	// subscribe adds k subscribers; each received payload is passed to got.
	subscribe(ctx context.Context, k int, got func(payload []byte)) error
	// publish sends one payload (to all subscribers when fan is true); flush pushes
	// out anything buffered.
	publish(payload []byte, fan bool) error
	flush() error
	// dropped reports copies the system counted as dropped.
	dropped() uint64
	close()
}

// natsHopShapes are NATS's setups for hops, by -nats-hops.
var natsHopShapes = map[string]func(context.Context) (target, string, error){
	"gateway": startNATSGateways, "leaf": startNATSLeaves, "leaf-hub-pair": startNATSLeavesHubPair,
}

// system is how to set one system up for each scenario.
type system struct {
	key    string
	link   func(context.Context) (target, error)
	hops   func(context.Context) (target, string, error)
	reqrep func(context.Context, options) (replier, error)
	stall  func(context.Context, options) (stallTarget, error)
}

func run(ctx context.Context, o options) error {
	var results []result
	systems := []system{
		{key: "nats", link: startNATS, hops: natsHopShapes[o.natsHops], reqrep: startNATSReqRep, stall: startNATSStall},
		{key: "node", link: startNodes, hops: startNodeHops, reqrep: startNodeReqRep, stall: startNodeStall},
		{key: "floor", link: startFloor}, // only when asked for (floor.go)
	}
	for _, s := range systems {
		if o.only != s.key && (o.only != "" || s.key == "floor") {
			continue
		}
		stop, err := profile(o, s.key)
		if err != nil {
			return err
		}
		r, err := runSystem(ctx, s, o)
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
		results = append(results, r)
	}
	out := render(o, results)
	fmt.Print(out)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(out), 0o644)
	}
	return nil
}

// runSystem runs the selected scenarios against one system, each on a fresh setup
// (link and fanout share one, as they always did).
func runSystem(ctx context.Context, s system, o options) (result, error) {
	r := result{system: s.key, load: map[string]string{}}
	if o.has("link") || o.has("fanout") {
		t, err := s.link(ctx)
		if err != nil {
			return r, fmt.Errorf("link: %w", err)
		}
		r.system = t.name()
		if o.has("link") {
			r.link, err = measureStream(ctx, t, o)
			r.hasLink = err == nil
		}
		if err == nil && o.has("fanout") {
			r.fanout, err = measureFanout(ctx, t, o)
			r.hasFanout = err == nil
		}
		r.linkDropped = t.dropped()
		r.load["link"] = loadavg()
		t.close()
		if err != nil {
			return r, fmt.Errorf("link/fanout: %w", err)
		}
	}
	if o.has("hops") {
		t, path, err := s.hops(ctx)
		if err != nil {
			return r, fmt.Errorf("hops: %w", err)
		}
		r.hops, err = measureStream(ctx, t, o)
		r.hops.system, r.hopsPath, r.hasHops = t.name(), path, err == nil
		r.hops.dropped = t.dropped()
		r.load["hops"] = loadavg()
		t.close()
		if err != nil {
			return r, fmt.Errorf("hops: %w", err)
		}
	}
	if o.has("reqrep") {
		q, err := s.reqrep(ctx, o)
		if err != nil {
			return r, fmt.Errorf("reqrep: %w", err)
		}
		r.reqrep, err = measureReqRep(ctx, q, o)
		r.reqrep.system, r.hasReqrep = q.name(), err == nil
		r.load["reqrep"] = loadavg()
		q.close()
		if err != nil {
			return r, fmt.Errorf("reqrep: %w", err)
		}
	}
	if o.has("stall") {
		st, err := s.stall(ctx, o)
		if err != nil {
			return r, fmt.Errorf("stall: %w", err)
		}
		r.stall, err = measureStall(ctx, st, o)
		r.stall.system, r.hasStall = st.name(), err == nil
		r.load["stall"] = loadavg()
		st.close()
		if err != nil {
			return r, fmt.Errorf("stall: %w", err)
		}
	}
	return r, nil
}

// profile starts a CPU profile of the node's runs when asked, and counts their
// allocations for a memory profile; the returned function writes both.
func profile(o options, system string) (func(), error) {
	if system != "node" {
		return func() {}, nil
	}
	stopCPU := func() {}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		stopCPU = func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}
	}
	if o.memprofile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	return func() {
		stopCPU()
		if o.memprofile == "" {
			return
		}
		f, err := os.Create(o.memprofile)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
		if err != nil {
			log.Printf("memory profile: %v", err)
		}
	}, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
