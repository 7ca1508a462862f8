package main

import (
	"fmt"
	"strings"
	"time"
)

// render prints a section per scenario run: its setup, a table with a row per system,
// and the node/NATS ratios when both ran.
func render(o options, rs []result) string {
	var b strings.Builder
	pair := func(has func(result) bool) (nats, node *result, ok bool) {
		if len(rs) != 2 || !has(rs[0]) || !has(rs[1]) {
			return nil, nil, false
		}
		return &rs[0], &rs[1], true
	}
	loads := func(scenario string) string {
		var parts []string
		for _, r := range rs {
			if l := r.load[scenario]; l != "" {
				parts = append(parts, fmt.Sprintf("%s %s", shortName(r.system), l))
			}
		}
		return strings.Join(parts, "; ")
	}
	if o.has("link") || o.has("fanout") {
		fmt.Fprintf(&b, "## One link (link, fanout)\n\n")
		fmt.Fprintf(&b, "%d-byte messages, one hop; throughput window %d, latency paced at %d msg/s for %s, fan-out to %d subscribers; load average %s\n\n",
			o.size, o.window, o.rate, o.latencyFor, o.fanout, loads("link"))
		fmt.Fprintln(&b, "| system | messages/s | p50 | p99 | paced, sent/s | fan-out deliveries/s | lost | counted dropped |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range rs {
			rate, p50, p99, paced, fan := "—", "—", "—", "—", "—"
			if r.hasLink {
				rate, p50, p99 = fmt.Sprintf("%.0f", r.link.msgsPerSec), dur(r.link.p50), dur(r.link.p99)
				paced = achieved(r.link.latencySamples, o)
			}
			if r.hasFanout {
				fan = fmt.Sprintf("%.0f", r.fanout.perSec)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %d |\n", r.system, rate, p50, p99, paced, fan, r.link.lost+r.fanout.lost, r.linkDropped)
		}
		var parts []string
		if nats, node, ok := pair(func(r result) bool { return r.hasLink }); ok && nats.link.msgsPerSec > 0 && nats.link.p99 > 0 {
			parts = append(parts, fmt.Sprintf("throughput %.2f× (goal ≥ 1.0×), p99 %.2f× (goal ≤ 1.0×)",
				node.link.msgsPerSec/nats.link.msgsPerSec, float64(node.link.p99)/float64(nats.link.p99)))
		}
		if nats, node, ok := pair(func(r result) bool { return r.hasFanout }); ok && nats.fanout.perSec > 0 {
			parts = append(parts, fmt.Sprintf("fan-out %.2f×", node.fanout.perSec/nats.fanout.perSec))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "\nnode / NATS: %s\n", strings.Join(parts, ", "))
		}
		b.WriteString("\n")
	}
	if o.has("hops") {
		fmt.Fprintf(&b, "## Two gateways (hops)\n\n")
		fmt.Fprintf(&b, "%d-byte messages across two gateways; throughput window %d, latency paced at %d msg/s for %s; load average %s\n\n",
			o.size, o.window, o.rate, o.latencyFor, loads("hops"))
		fmt.Fprintln(&b, "| system | path | messages/s | p50 | p99 | paced, sent/s | lost | counted dropped |")
		fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|---:|")
		for _, r := range rs {
			if r.hasHops {
				fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %d | %d |\n", r.hops.system, r.hopsPath, r.hops.msgsPerSec,
					dur(r.hops.p50), dur(r.hops.p99), achieved(r.hops.latencySamples, o), r.hops.lost, r.hops.dropped)
			}
		}
		if nats, node, ok := pair(func(r result) bool { return r.hasHops }); ok && nats.hops.msgsPerSec > 0 && nats.hops.p99 > 0 {
			fmt.Fprintf(&b, "\nnode / NATS: throughput %.2f×, p99 %.2f×\n",
				node.hops.msgsPerSec/nats.hops.msgsPerSec, float64(node.hops.p99)/float64(nats.hops.p99))
		}
		b.WriteString("\n")
	}
	if o.has("reqrep") {
		fmt.Fprintf(&b, "## Request/reply across one link (reqrep)\n\n")
		fmt.Fprintf(&b, "%d-byte requests, each echoed by one responder on the far side; %d requests with %d in flight, latency paced at %d requests/s for %s; load average %s\n\n",
			o.size, o.requests, o.requesters, o.rate, o.latencyFor, loads("reqrep"))
		fmt.Fprintln(&b, "| system | requests/s | p50 | p99 | paced, sent/s | failed |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|")
		var notes []string
		for _, r := range rs {
			if r.hasReqrep {
				fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %d |\n", r.reqrep.system, r.reqrep.perSec, dur(r.reqrep.p50), dur(r.reqrep.p99),
					achieved(r.reqrep.latencySamples, o), r.reqrep.failed)
				if r.reqrep.firstErr != "" {
					notes = append(notes, fmt.Sprintf("%s: first failure: %s", shortName(r.system), r.reqrep.firstErr))
				}
			}
		}
		if nats, node, ok := pair(func(r result) bool { return r.hasReqrep }); ok && nats.reqrep.perSec > 0 && nats.reqrep.p99 > 0 {
			fmt.Fprintf(&b, "\nnode / NATS: requests/s %.2f×, p99 %.2f×\n",
				node.reqrep.perSec/nats.reqrep.perSec, float64(node.reqrep.p99)/float64(nats.reqrep.p99))
		}
		for _, n := range notes {
			fmt.Fprintf(&b, "\n%s\n", n)
		}
		b.WriteString("\n")
	}
	if o.has("stall") {
		k := o.stallSubscribers
		fmt.Fprintf(&b, "## Stalled subscriber (stall)\n\n")
		fmt.Fprintf(&b, "%d subscribers of one name on the far side of one link (a broadcast for the node, a plain subject for NATS), %d %d-byte messages per phase; deliveries/s of the %d others with all %d reading, then with one that stopped reading; load average %s\n\n",
			k, o.stallMessages, o.size, k-1, k, loads("stall"))
		fmt.Fprintln(&b, "| system | others, all reading | others, one stalled | stalled / all reading | stalled one cut off | stalled one got | slow consumers | counted dropped | lost (others) |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|---|---:|---:|---:|---:|")
		for _, r := range rs {
			if !r.hasStall {
				continue
			}
			s := r.stall
			cut := "no (" + s.how + ")"
			if s.cutOff {
				cut = "yes (" + s.how + ")"
			}
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f× | %s | %d of %d | %d | %d | %d |\n", s.system, s.before, s.during,
				ratio(s.during, s.before), cut, s.stalledGot, s.messages, s.slowConsumers, s.dropped, s.lost)
		}
		if nats, node, ok := pair(func(r result) bool { return r.hasStall }); ok && nats.stall.during > 0 {
			fmt.Fprintf(&b, "\nnode / NATS: others' deliveries/s with one stalled %.2f×; stalled / all reading %.2f× (node) against %.2f× (NATS)\n",
				node.stall.during/nats.stall.during, ratio(node.stall.during, node.stall.before), ratio(nats.stall.during, nats.stall.before))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// achieved is the rate a paced latency run reached, samples over its length: the rate
// asked for unless sends (or requests) failed or held the pacer up past the run's end.
func achieved(samples int, o options) string {
	return fmt.Sprintf("%.0f", float64(samples)/o.latencyFor.Seconds())
}

func dur(d time.Duration) string { return d.Round(time.Microsecond).String() }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// shortName is "NATS" or "node".
func shortName(system string) string {
	switch {
	case strings.HasPrefix(system, "NATS") || system == "nats":
		return "NATS"
	case strings.HasPrefix(system, "floor"):
		return "floor"
	}
	return "node"
}
