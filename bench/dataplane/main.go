// Command dataplane benchmarks the reference data-plane node beside a NATS core
// anchor, in one run on one machine: 1 KiB messages from a publisher in group a to a
// subscriber in group b across one link (client -> node a/n1 -> link -> node b/n1 ->
// client), against two embedded nats-servers joined by a route (client -> server 1 ->
// route -> server 2 -> client). It prints a markdown table:
//
//   - throughput: messages/s with at most -window messages in flight, so neither system
//     is pushed into dropping;
//
//   - latency: p50 and p99 of publish-to-receive at a paced -rate;
//
//   - fan-out: deliveries/s from one publisher to -fanout subscribers (a broadcast for
//     the node, a plain subject for NATS).
//
//     go run ./bench/dataplane
//     go run ./bench/dataplane -messages 500000 -out docs/benchmarks/dataplane-run.md
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"strings"
	"time"
)

type options struct {
	messages, size, window, rate, fanout, fanoutMessages int
	latencyFor                                           time.Duration
	out, cpuprofile, only                                string
}

func main() {
	var o options
	flag.IntVar(&o.messages, "messages", 200000, "messages per throughput run")
	flag.IntVar(&o.size, "size", 1024, "payload bytes")
	flag.IntVar(&o.window, "window", 4096, "messages in flight at most (throughput runs)")
	flag.IntVar(&o.rate, "rate", 2000, "messages/s of the latency runs")
	flag.DurationVar(&o.latencyFor, "latency-for", 3*time.Second, "length of each latency run")
	flag.IntVar(&o.fanout, "fanout", 100, "subscribers of the fan-out runs")
	flag.IntVar(&o.fanoutMessages, "fanout-messages", 5000, "messages per fan-out run")
	flag.StringVar(&o.out, "out", "", "also write the table to this file")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the node's runs to this file (go tool pprof)")
	flag.StringVar(&o.only, "only", "", "run one system only: nats or node")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// result is one system's figures.
type result struct {
	system             string
	msgsPerSec         float64
	p50, p99           time.Duration
	fanoutPerSec       float64
	lost, dropped      uint64
	fanoutLost         uint64
	latencySamples     int
	throughputMessages int
}

// target is one system under test: a publisher and subscribers across one hop.
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

func run(ctx context.Context, o options) error {
	var results []result
	systems := map[string]func(context.Context) (target, error){"nats": startNATS, "node": startNodes}
	for _, name := range []string{"nats", "node"} {
		if o.only != "" && o.only != name {
			continue
		}
		t, err := systems[name](ctx)
		if err != nil {
			return err
		}
		stop, err := profile(o, name)
		if err != nil {
			t.close()
			return err
		}
		r, err := measure(ctx, t, o)
		stop()
		t.close()
		if err != nil {
			return fmt.Errorf("%s: %w", t.name(), err)
		}
		results = append(results, r)
	}
	table := render(o, results)
	fmt.Print(table)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(table), 0o644)
	}
	return nil
}

// profile starts a CPU profile of the node's runs when asked; the returned function
// stops it.
func profile(o options, system string) (func(), error) {
	if o.cpuprofile == "" || system != "node" {
		return func() {}, nil
	}
	f, err := os.Create(o.cpuprofile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
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

func render(o options, rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d-byte messages, one hop; throughput window %d, latency at %d msg/s for %s, fan-out to %d subscribers; load average %s\n\n",
		o.size, o.window, o.rate, o.latencyFor, o.fanout, loadavg())
	fmt.Fprintln(&b, "| system | messages/s | p50 | p99 | fan-out deliveries/s | lost | counted dropped |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.0f | %d | %d |\n", r.system, r.msgsPerSec,
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.fanoutPerSec, r.lost+r.fanoutLost, r.dropped)
	}
	if len(rs) == 2 && rs[0].msgsPerSec > 0 && rs[0].p99 > 0 {
		fmt.Fprintf(&b, "\nnode / NATS: throughput %.2f× (goal ≥ 0.5×), p99 %.2f× (goal ≤ 2×), fan-out %.2f×\n",
			rs[1].msgsPerSec/rs[0].msgsPerSec, float64(rs[1].p99)/float64(rs[0].p99), rs[1].fanoutPerSec/rs[0].fanoutPerSec)
	}
	return b.String()
}
