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
	"syscall"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/freeport"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// system is everything one soak run holds: the backend and registrar processes, the
// agents and watchers (registrar clients in this process), and the fleet.
type system struct {
	o       options
	backend string
	dir     string
	logDir  string
	log     *slog.Logger

	members    []*proc  // the registry backend: etcd or nats-server, one or three members
	registrars []*proc  // replicas of cluster "east"
	metrics    []string // each registrar's /metrics URL, where its held entries are read
	held       *heldWatch
	directOnce sync.Once
	direct     registry.Registry // the backend opened directly, for the checks at registrars' returns (rehome.go)
	net        *nemesis          // nil unless the soak runs with the network nemesis (nemesis.go)
	oracle     *oracle
	agents     []*agent
	watchers   []*watcher
	fleet      *fleet
	closers    []func()
	start      time.Time // when the faults began
}

func newSystem(o options, backend string, log *slog.Logger) (_ *system, err error) {
	dir, err := os.MkdirTemp("", "switchboard-soak-"+backend+"-")
	if err != nil {
		return nil, err
	}
	s := &system{o: o, backend: backend, dir: dir, logDir: filepath.Join(dir, "logs"), log: log, oracle: newOracle()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		return nil, err
	}
	var addrs []string
	if o.network {
		addrs, err = s.startInNamespaces()
	} else {
		addrs, err = s.startOnLoopback()
	}
	if err != nil {
		return nil, err
	}
	s.held = newHeldWatch(s.metrics, log)
	clientLog := s.fileLogger("clients")
	newClient := func(name string) (*client.Client, error) {
		c, err := client.New(client.Options{Addresses: addrs, Node: name, Cluster: "east", Logger: clientLog.With("client", name)})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() { _ = c.Close() })
		return c, nil
	}
	for i := range o.agents {
		c, err := newClient("agent-" + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		s.agents = append(s.agents, newAgent(i, o.keys, o.ttl, o.seed, c, s.oracle, log))
	}
	for i := range o.watchers {
		c, err := newClient("watcher-" + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		s.watchers = append(s.watchers, newWatcher(i, c, log))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range s.agents {
		if err := a.c.WaitReady(ctx); err != nil {
			return nil, fmt.Errorf("agent %d: %w", a.id, err)
		}
	}
	if s.fleet, err = newFleet(dir, o.edges, o.perGroup, s.fileLogger("controlplane")); err != nil {
		return nil, fmt.Errorf("control plane fleet: %w", err)
	}
	s.closers = append(s.closers, s.fleet.close)
	return s, nil
}

// startOnLoopback starts one backend server and the registrars on 127.0.0.1 and
// returns the registrars' addresses.
func (s *system) startOnLoopback() ([]string, error) {
	// Restarts reuse the ports, so each child keeps its address.
	ports, err := freeport.On("127.0.0.1", 2+2*s.o.replicas)
	if err != nil {
		return nil, err
	}
	var store *proc
	switch s.backend {
	case "etcd":
		store = newProc("etcd", s.logDir, 90*time.Second, "etcd", "-dir", filepath.Join(s.dir, "etcd"),
			"-port", strconv.Itoa(ports[0]), "-peer-port", strconv.Itoa(ports[1]))
	case "jetstream":
		store = newProc("nats", s.logDir, 90*time.Second, "nats", "-dir", filepath.Join(s.dir, "nats"), "-port", strconv.Itoa(ports[0]))
	default:
		return nil, fmt.Errorf("backend %q: want etcd or jetstream", s.backend)
	}
	s.members = []*proc{store}
	s.closers = append(s.closers, store.stop)
	if err := store.start(); err != nil {
		return nil, err
	}
	var addrs []string
	for i := range s.o.replicas {
		addr := "127.0.0.1:" + strconv.Itoa(ports[2+i])
		health := "127.0.0.1:" + strconv.Itoa(ports[2+s.o.replicas+i])
		args := append([]string{"registrar", "-backend", s.backend, "-backend-url", store.addr, "-listen", addr}, s.holdArgs(health)...)
		p := newProc("registrar-"+strconv.Itoa(i), s.logDir, 90*time.Second, args...)
		s.registrars = append(s.registrars, p)
		s.closers = append(s.closers, p.stop)
		if err := p.start(); err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// holdArgs are a registrar child's flags for liveness, and for serving its metrics at
// health (host:port), whose URL it records.
func (s *system) holdArgs(health string) []string {
	s.metrics = append(s.metrics, "http://"+health+"/metrics")
	return []string{"-health-listen", health, "-liveness-ttl", s.o.livenessTTL.String()}
}

// backendURLs is every member's client URL, comma-separated.
func (s *system) backendURLs() string {
	var urls []string
	for _, m := range s.members {
		urls = append(urls, m.addr)
	}
	return strings.Join(urls, ",")
}

// fileLogger logs warnings and errors of in-process components to a file of the
// run's log directory, keeping the console for the soak's own account.
func (s *system) fileLogger(name string) *slog.Logger {
	f, err := os.OpenFile(filepath.Join(s.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.log.Warn("no log file", "name", name, "err", err)
		return slog.New(slog.DiscardHandler)
	}
	s.closers = append(s.closers, func() { _ = f.Close() })
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// close releases everything, in reverse order of creation: clients and the fleet
// before the registrars, the registrars before the backend.
func (s *system) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

func (s *system) procs() []*proc {
	return append(append([]*proc(nil), s.members...), s.registrars...)
}

func (s *system) describe(f fault) string {
	if f.lane == "network" {
		return s.describeNetwork(f)
	}
	var parts []string
	switch f.kind {
	case killRegistrar, freezeRegistrar:
		parts = append(parts, s.registrars[f.targets[0]].name)
	case killHolding:
		parts = append(parts, fmt.Sprintf("%s (holding %d entries)", s.registrars[f.targets[0]].name, s.held.entries(f.targets[0])))
	case freezeBackend, killBackend:
		parts = append(parts, s.members[f.member].name)
	case killAllRegistrars:
		parts = append(parts, "every registrar")
	case killBoth:
		parts = append(parts, s.members[f.member].name, s.registrars[f.targets[0]].name)
	case stallWatcher:
		parts = append(parts, "watcher-0")
	case restartCP:
		parts = append(parts, "control plane")
	case calm:
		parts = append(parts, "(nothing)")
	default:
		for _, t := range f.targets {
			parts = append(parts, s.fleet.nodes[t].ID())
		}
	}
	return strings.Join(parts, ",")
}

func (s *system) inject(f fault) error {
	if f.lane == "network" {
		return s.injectNetwork(f)
	}
	s.held.killing(f, time.Since(s.start))
	switch f.kind {
	case killRegistrar, killHolding:
		return s.registrars[f.targets[0]].kill()
	case killAllRegistrars:
		var errs []error
		for _, p := range s.registrars {
			errs = append(errs, p.kill())
		}
		return errors.Join(errs...)
	case killBackend:
		return s.members[f.member].kill()
	case killBoth:
		return errors.Join(s.members[f.member].kill(), s.registrars[f.targets[0]].kill())
	case freezeRegistrar:
		return s.registrars[f.targets[0]].signal(syscall.SIGSTOP)
	case freezeBackend:
		return s.members[f.member].signal(syscall.SIGSTOP)
	case stallWatcher:
		s.watchers[0].stall(24 * time.Hour) // until healed
		return nil
	case calm:
		return nil
	case restartCP:
		return s.fleet.stopCP()
	case duplicateNode:
		return s.fleet.startDuplicate(s.fleet.nodes[f.targets[0]].ID())
	case killDPNode, killDPNodes:
		for _, t := range f.targets {
			if n := s.fleet.nodes[t]; n.Up() {
				n.Crash()
			}
		}
		return nil
	}
	return fmt.Errorf("unknown fault %s", f.kind)
}

// heal undoes f, and reports how many packets it dropped when it was a cut.
func (s *system) heal(f fault) (int64, error) {
	if f.lane == "network" {
		return s.healNetwork(f)
	}
	return 0, s.healCrash(f)
}

func (s *system) healCrash(f fault) error {
	s.rehomed(f)
	switch f.kind {
	case killRegistrar, killHolding:
		return startIfDown(s.registrars[f.targets[0]])
	case killAllRegistrars:
		return s.startAll(s.registrars)
	case killBackend:
		return startIfDown(s.members[f.member])
	case freezeRegistrar:
		return s.registrars[f.targets[0]].signal(syscall.SIGCONT)
	case freezeBackend:
		return s.members[f.member].signal(syscall.SIGCONT)
	case killBoth:
		// Side by side: the registrar comes up first and waits for its backend.
		return s.startAll([]*proc{s.registrars[f.targets[0]], s.members[f.member]})
	case stallWatcher:
		s.watchers[0].unstall()
		return nil
	case calm:
		return nil
	case restartCP:
		if s.fleet.server() == nil {
			return s.fleet.startCP()
		}
		return nil
	case duplicateNode:
		s.fleet.stopDuplicate()
		return nil
	case killDPNode, killDPNodes:
		var errs []error
		for _, t := range f.targets {
			if n := s.fleet.nodes[t]; !n.Up() {
				errs = append(errs, n.Restart())
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown fault %s", f.kind)
}

func startIfDown(p *proc) error {
	if p.running() {
		return nil
	}
	_ = p.exitedOnItsOwn() // forget an incarnation that died meanwhile
	return p.start()
}

// startAll starts the replicas side by side, as an orchestrator would.
func (s *system) startAll(ps []*proc) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = startIfDown(p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// healAll undoes whatever is still broken once the faults have stopped.
func (s *system) healAll() error {
	for _, p := range s.procs() {
		if p.running() {
			_ = p.signal(syscall.SIGCONT) // a thaw of a process that is not frozen does nothing
		}
	}
	var errs []error
	if s.net != nil {
		errs = append(errs, s.healNetworkAll())
	}
	errs = append(errs, s.startAll(s.members), s.startAll(s.registrars))
	for _, w := range s.watchers {
		w.unstall()
	}
	s.fleet.stopDuplicate()
	if s.fleet.server() == nil {
		errs = append(errs, s.fleet.startCP())
	}
	for _, n := range s.fleet.nodes {
		if !n.Up() {
			errs = append(errs, n.Restart())
		}
	}
	return errors.Join(errs...)
}
