package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fleet is everything a run holds: the backend members, each cluster's registrars
// and agents process, and the parent's observer of the backend.
type fleet struct {
	o          options
	log        *slog.Logger
	dir        string
	logDir     string
	members    []*proc
	registrars [][]*proc // by cluster
	agents     []*proc   // by cluster
	obs        *observer
	seen       chan seenLine
	emptyRSS   float64 // the registrars' mean RSS before any registration, MiB
}

// seenLine is a probe change that an agents process's watcher saw.
type seenLine struct {
	cluster, id string
	at          time.Time
}

func startFleet(ctx context.Context, o options, log *slog.Logger) (_ *fleet, err error) {
	dir, err := os.MkdirTemp("", "switchboard-fleet-")
	if err != nil {
		return nil, err
	}
	f := &fleet{o: o, log: log, dir: dir, logDir: filepath.Join(dir, "logs"), seen: make(chan seenLine, 1<<16)}
	defer func() {
		if err != nil {
			f.abort()
		}
	}()
	if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return nil, err
	}
	log.Info("starting backend", "backend", o.backend, "members", backendMembers, "logs", f.logDir)
	if f.members, err = startMembers(o.backend, dir, f.logDir); err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	if f.obs, err = newObserver(ctx, o.backend, f.memberURLs(), log.With("component", "observer")); err != nil {
		return nil, fmt.Errorf("backend observer: %w", err)
	}
	log.Info("starting registrars", "clusters", o.clusters, "per_cluster", o.registrars)
	if err := f.startRegistrars(); err != nil {
		return nil, err
	}
	if f.emptyRSS, _, _, _, err = f.rssMiB(); err != nil {
		return nil, err
	}
	log.Info("starting agents and registering", "endpoints_per_cluster", o.endpoints, "ttl", o.ttl)
	start := time.Now()
	if err := f.startAgents(); err != nil {
		return nil, err
	}
	log.Info("every cluster registered", "endpoints", o.clusters*o.endpoints, "in", time.Since(start).Round(time.Millisecond))
	return f, nil
}

func (f *fleet) memberURLs() []string {
	var urls []string
	for _, m := range f.members {
		urls = append(urls, m.addr)
	}
	return urls
}

// startAll runs start(i) for i in [0, n) side by side.
func startAll(n int, start func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = start(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *fleet) startRegistrars() error {
	f.registrars = make([][]*proc, f.o.clusters)
	for c := range f.registrars {
		f.registrars[c] = make([]*proc, f.o.registrars)
	}
	urls := strings.Join(f.memberURLs(), ",")
	return startAll(f.o.clusters*f.o.registrars, func(i int) error {
		c, r := i/f.o.registrars, i%f.o.registrars
		p, err := startProc(fmt.Sprintf("registrar-%s-%d", clusterName(c), r), f.logDir, 2*time.Minute, nil, "registrar",
			"-backend", f.o.backend, "-backend-url", urls, "-replicas", strconv.Itoa(backendMembers), "-cluster", clusterName(c),
			"-liveness-ttl", f.o.livenessTTL.String(), "-hold", f.o.hold)
		f.registrars[c][r] = p
		return err
	})
}

// startAgents starts every cluster's agents process; each is ready once its
// endpoints are registered and its watchers have their initial state.
func (f *fleet) startAgents() error {
	f.agents = make([]*proc, f.o.clusters)
	return startAll(f.o.clusters, func(c int) error {
		var addrs []string
		for _, r := range f.registrars[c] {
			addrs = append(addrs, r.addr)
		}
		p, err := startProc("agents-"+clusterName(c), f.logDir, 4*time.Minute, f.tapSeen, "agents",
			"-cluster", clusterName(c), "-index", strconv.Itoa(c), "-clusters", strconv.Itoa(f.o.clusters),
			"-registrars", strings.Join(addrs, ","), "-endpoints", strconv.Itoa(f.o.endpoints),
			"-per-agent", strconv.Itoa(f.o.perAgent), "-conns", strconv.Itoa(f.o.conns), "-ttl", f.o.ttl.String())
		f.agents[c] = p
		return err
	})
}

// tapSeen takes the "seen" lines, which come whenever a watcher sees a change.
func (f *fleet) tapSeen(line string) bool {
	rest, ok := strings.CutPrefix(line, "seen ")
	if !ok {
		return false
	}
	parts := strings.Fields(rest)
	if len(parts) != 3 {
		return true
	}
	ns, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return true
	}
	select {
	case f.seen <- seenLine{cluster: parts[0], id: parts[1], at: time.Unix(0, ns)}:
	default: // nobody is timing changes: drop
	}
	return true
}

func (f *fleet) allProcs() []*proc {
	ps := append([]*proc(nil), f.agents...)
	for _, rs := range f.registrars {
		ps = append(ps, rs...)
	}
	return append(ps, f.members...)
}

// stop ends everything in order: agents before their registrars, registrars before
// the backend, each gently (stdin closed) with a deadline, then removes the
// temporary directory.
func (f *fleet) stop() {
	if f.obs != nil {
		f.obs.close()
	}
	stopAll := func(ps []*proc, grace time.Duration) {
		var wg sync.WaitGroup
		for _, p := range ps {
			if p != nil {
				wg.Go(func() { p.stop(grace) })
			}
		}
		wg.Wait()
	}
	stopAll(f.agents, 15*time.Second)
	var regs []*proc
	for _, rs := range f.registrars {
		regs = append(regs, rs...)
	}
	stopAll(regs, 15*time.Second)
	// The last member of a backend losing its quorum can take its time to stop, and
	// its data is thrown away.
	stopAll(f.members, 3*time.Second)
	f.removeDir()
}

// abort kills every child's process group at once: after a failure nothing is worth
// a graceful stop.
func (f *fleet) abort() {
	if f.obs != nil {
		f.obs.close()
	}
	for _, p := range f.allProcs() {
		if p != nil {
			_ = p.kill()
		}
	}
	f.removeDir()
}

func (f *fleet) removeDir() {
	if f.o.keep {
		f.log.Info("kept the run's directory", "dir", f.dir)
		return
	}
	if err := os.RemoveAll(f.dir); err != nil {
		f.log.Warn("temporary directory not removed", "dir", f.dir, "err", err)
	}
}
