// Command fleet measures a fleet of Switchboard clusters on one shared registry
// backend, scaled down, on real servers: what the backend pays at steady state,
// what a registrar holds, how fast a change crosses clusters, and what is lost when
// a registrar replica or a backend member is SIGKILLed.
//
// Switchboard must make steady-state backend cost proportional to change, not to
// endpoints. Today every agent re-publishes each TTL'd entry every TTL/3 and the
// registrar passes each refresh to the backend, so at steady state the backend
// writes about endpoints/(TTL/3) entries a second while nothing changes. This
// program measures that figure (counted by the backend itself) and the others, so
// that the change that moves liveness into the registrars can be measured against
// it.
//
//	go run ./bench/fleet -backend etcd|jetstream -clusters 2 -registrars 2 \
//	    -endpoints 2000 -ttl 30s -duration 30s -out fleet.md
//
// Every server is a process of its own: this binary re-executed as
// `fleet child etcd|nats|registrar|agents`. The backend is a 3-member etcd cluster
// or a 3-node JetStream cluster with the registry stream at R3; each cluster has
// -registrars registrar processes and one agents process that plays the cluster's
// agents over gRPC (agents.go). The phases, selected with -phases, run in order:
//
//   - steady: backend writes/s at steady state, registrar RSS
//   - propagation: time from a change in cluster c1 until other clusters see it
//   - replica: SIGKILL a registrar of c1, time the re-homing, count entries lost
//   - member: SIGKILL a backend member, measure the write gap, count entries lost
//
// It is a program, not a library: nothing here may be imported.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(childMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}

// run is the whole program: 0 when every goal was met, 1 when one was not or the
// run failed, 2 on bad flags, 130 when interrupted.
func run(args []string) int {
	o, err := parseOptions(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	met, err := measure(ctx, o, log)
	if errors.Is(ctx.Err(), context.Canceled) {
		log.Warn("interrupted: every child stopped")
		return 130
	}
	if err != nil {
		log.Error("run failed", "err", err)
		return 1
	}
	if !met {
		log.Error("a goal was not met (see the report)")
		return 1
	}
	return 0
}

// measure starts the fleet, runs the phases and writes the report. An interrupted
// run stops its children gently; a failed one (-timeout passing included) kills
// their process groups.
func measure(ctx context.Context, o options, log *slog.Logger) (met bool, err error) {
	before := probeHost(log)
	f, err := startFleet(ctx, o, log)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			f.abort()
			return
		}
		f.stop()
	}()
	phases := map[string]func(context.Context) ([]row, error){
		"steady": f.steady, "propagation": f.propagation, "replica": f.replica, "member": f.member,
	}
	var rows []row
	for _, name := range o.phases {
		load := loadAvg()
		r, err := phases[name](ctx)
		if err != nil {
			return false, fmt.Errorf("phase %s: %w", name, err)
		}
		for i := range r {
			r[i].load = load + " → " + loadAvg()
			log.Info(name, "figure", r[i].figure, "value", r[i].value)
		}
		rows = append(rows, r...)
	}
	after := probeHost(log)
	return writeReport(o, rows, before, after)
}
