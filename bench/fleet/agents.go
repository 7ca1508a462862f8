package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The agents child: one process per cluster that plays every agent of the cluster
// over real gRPC. Simulated agents share a few registrar clients (one client is one
// agent's connection: a real node has its own, but thousands of watch streams in one
// process would measure this process, not the registrar). Client j lists the
// replicas starting at replica j%R and keeps to that order, so the agents spread
// over the replicas and fail over to the next one when theirs dies.
//
// It takes orders on stdin and answers on stdout, one line each:
//
//	count              -> count {"writes":N,"batches":B,"failures":F}
//	change ID          -> changed ID START_NS ACK_NS   (writes this cluster's probe)
//	mark               -> marked                        (starts a loss/gap window)
//	report             -> report {lossReport as JSON}
//	rehome R           -> rehomed {"clients":K,"ms":M}  (clients homed on replica R)
//
// and, whenever its probe watcher sees another cluster's probe change:
//
//	seen WATCHING_CLUSTER ID NS

type agentsConfig struct {
	cluster    string
	index      int
	clusters   int
	registrars string
	endpoints  int
	perAgent   int
	conns      int
	ttl        time.Duration
}

func (c *agentsConfig) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.index, "index", 0, "this cluster's index, from 0 (agents)")
	fs.IntVar(&c.clusters, "clusters", 1, "clusters in the fleet (agents)")
	fs.StringVar(&c.registrars, "registrars", "", "this cluster's registrar addresses, comma-separated (agents)")
	fs.IntVar(&c.endpoints, "endpoints", 100, "endpoints this cluster registers (agents)")
	fs.IntVar(&c.perAgent, "per-agent", 10, "endpoints per simulated agent (agents)")
	fs.IntVar(&c.conns, "conns", 4, "registrar clients shared by the simulated agents (agents)")
	fs.DurationVar(&c.ttl, "ttl", 30*time.Second, "TTL of every registration (agents)")
}

// watched is the cluster whose endpoints this process's loss watcher follows: the
// next one, so that a loss is seen from another cluster, as a consumer would.
func (c agentsConfig) watched() int { return (c.index + 1) % c.clusters }

// fleetAgents is the running child.
type fleetAgents struct {
	cfg     agentsConfig
	log     *slog.Logger
	clients []*client.Client
	homes   []int          // replica each client starts on
	watcher *client.Client // never written through
	agents  [][]endpoint.Endpoint
	out     *lineWriter

	mu       sync.Mutex
	writes   int // endpoint writes acknowledged
	batches  int
	failures int
	// The window opened by mark: the longest time between two acknowledged writes.
	lastAck, markAt time.Time
	maxGap          time.Duration
	loss            *lossWatch
}

// lineWriter serializes the child's stdout lines.
type lineWriter struct{ mu sync.Mutex }

func (w *lineWriter) println(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func runAgents(ctx context.Context, log *slog.Logger, cfg agentsConfig, orders <-chan string) error {
	f := &fleetAgents{cfg: cfg, log: log, out: &lineWriter{}}
	defer f.close()
	if err := f.dial(); err != nil {
		return err
	}
	start := time.Now()
	if err := f.registerAll(ctx); err != nil {
		return err
	}
	log.Info("registered", "endpoints", cfg.endpoints, "in", time.Since(start).Round(time.Millisecond))
	if err := f.startWatchers(ctx); err != nil {
		return err
	}
	for i := range f.agents {
		go f.refreshLoop(ctx, i)
	}
	f.out.println("ready %d", cfg.endpoints)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case o := <-orders:
			f.obey(ctx, o)
		}
	}
}

// dial makes the clients and splits the endpoints among the simulated agents.
func (f *fleetAgents) dial() error {
	addrs := strings.Split(f.cfg.registrars, ",")
	for j := range f.cfg.conns {
		home := j % len(addrs)
		c, err := client.New(client.Options{
			Addresses: append(append([]string(nil), addrs[home:]...), addrs[:home]...), InOrder: true, Scoped: true,
			Node: fmt.Sprintf("agents-%s-%d", f.cfg.cluster, j), Cluster: f.cfg.cluster, Logger: f.log.With("client", j),
		})
		if err != nil {
			return err
		}
		f.clients, f.homes = append(f.clients, c), append(f.homes, home)
	}
	for i := 0; i < f.cfg.endpoints; i += f.cfg.perAgent {
		var eps []endpoint.Endpoint
		for k := i; k < min(i+f.cfg.perAgent, f.cfg.endpoints); k++ {
			eps = append(eps, fleetEndpoint(f.cfg.index, k, f.cfg.perAgent, f.cfg.ttl))
		}
		f.agents = append(f.agents, eps)
	}
	return nil
}

func (f *fleetAgents) close() {
	for _, c := range append(f.clients, f.watcher) {
		if c != nil {
			_ = c.Close()
		}
	}
}

// clientOf is the connection agent a writes through.
func (f *fleetAgents) clientOf(a int) *client.Client { return f.clients[a%len(f.clients)] }

// registerAll registers every agent's endpoints, a few agents at a time, retrying
// each until it is acknowledged; two minutes bound the whole.
func (f *fleetAgents) registerAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 16)
	errs := make([]error, len(f.agents))
	var wg sync.WaitGroup
	for a := range f.agents {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for {
				err := f.write(ctx, a)
				if err == nil || ctx.Err() != nil {
					errs[a] = err
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write publishes agent a's endpoints in one batch, as the agent's loop publishes
// the entries that are due together.
func (f *fleetAgents) write(ctx context.Context, a int) error {
	ops := make([]registry.Op, len(f.agents[a]))
	for i, e := range f.agents[a] {
		ops[i] = registry.Register(e)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := f.clientOf(a).Apply(ctx, ops)
	f.counted(len(ops), err)
	return err
}

// counted records one batch's outcome.
func (f *fleetAgents) counted(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failures++
		return
	}
	now := time.Now()
	f.writes += n
	f.batches++
	if !f.markAt.IsZero() {
		f.maxGap = max(f.maxGap, now.Sub(f.lastAck))
	}
	f.lastAck = now
}

// refreshLoop re-publishes agent a's entries every TTL/3, as agent.RefreshFraction
// has the real agent do; the first refresh comes at a random point of the first
// period, so that the fleet's refreshes are spread as independent agents' are. A
// failed write is retried with the agent's backoff (500 ms doubling), never later
// than the next refresh would be.
func (f *fleetAgents) refreshLoop(ctx context.Context, a int) {
	period := f.cfg.ttl / 3
	next := time.Duration(rand.Int64N(int64(period)))
	backoff := 500 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		if err := f.write(ctx, a); err != nil {
			f.log.Debug("refresh failed", "agent", a, "err", err)
			next, backoff = min(backoff, period), min(2*backoff, 30*time.Second)
			continue
		}
		next, backoff = period, 500*time.Millisecond
	}
}

// obey carries out one order; each answers with exactly one line.
func (f *fleetAgents) obey(ctx context.Context, order string) {
	verb, arg, _ := strings.Cut(order, " ")
	switch verb {
	case "count":
		f.mu.Lock()
		b, _ := json.Marshal(map[string]int{"writes": f.writes, "batches": f.batches, "failures": f.failures})
		f.mu.Unlock()
		f.out.println("count %s", b)
	case "change":
		f.change(ctx, arg)
	case "mark":
		f.mu.Lock()
		f.markAt, f.lastAck, f.maxGap, f.failures = time.Now(), time.Now(), 0, 0
		f.mu.Unlock()
		f.loss.mark()
		f.out.println("marked %d", time.Now().UnixNano())
	case "report":
		b, _ := json.Marshal(f.report())
		f.out.println("report %s", b)
	case "rehome":
		r, _ := strconv.Atoi(arg)
		go f.rehome(ctx, r) // the order loop stays free
	default:
		f.out.println("error unknown order %q", order)
	}
}

// change writes this cluster's probe entry with a new id.
func (f *fleetAgents) change(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err := f.clients[0].Apply(ctx, []registry.Op{registry.Register(probeEndpoint(f.cfg.index, id, f.cfg.ttl))})
	if err != nil {
		f.out.println("error change %s: %v", id, err)
		return
	}
	f.out.println("changed %s %d %d", id, start.UnixNano(), time.Now().UnixNano())
}

// rehome times how long every client that started on replica r takes to have a
// write acknowledged again (through another replica once r is dead).
func (f *fleetAgents) rehome(ctx context.Context, r int) {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	n, failed := 0, 0
	for j, c := range f.clients {
		if f.homes[j] != r {
			continue
		}
		n++
		wg.Go(func() {
			ok := f.writeUntilAcked(ctx, c, j, start.Add(time.Minute))
			mu.Lock()
			defer mu.Unlock()
			worst = max(worst, time.Since(start))
			if !ok {
				failed++
			}
		})
	}
	wg.Wait()
	f.out.println(`rehomed {"clients":%d,"failed":%d,"ms":%d}`, n, failed, worst.Milliseconds())
}

// writeUntilAcked re-publishes the first agent on client j until a write is
// acknowledged or the deadline passes.
func (f *fleetAgents) writeUntilAcked(ctx context.Context, c *client.Client, j int, deadline time.Time) bool {
	if j >= len(f.agents) {
		return true // a client with no agent has nothing to re-home
	}
	ops := []registry.Op{registry.Register(f.agents[j][0])}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Apply(cctx, ops)
		cancel()
		f.counted(1, err)
		if err == nil {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
