package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// agent is one simulated node: a registry it writes to, reads from once a second
// (an xDS snapshot rebuild) and watches.
type agent struct {
	r    registry.Registry
	mu   sync.Mutex
	seen map[string]time.Time // address -> when this agent saw it
}

func (a *agent) follow(ctx context.Context) error {
	ch, err := a.r.(registry.Watcher).Watch(ctx, endpoint.Filter{})
	if err != nil {
		return err
	}
	go func() {
		for ev := range ch {
			if ev.Type == registry.Added {
				a.mu.Lock()
				a.seen[ev.Endpoint.Address] = time.Now()
				a.mu.Unlock()
			}
		}
	}()
	return nil
}

func (a *agent) sawAt(address string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.seen[address]
	return t, ok
}

// directVsRegistrar runs the same agent workload against etcd directly and through
// one registrar, and reports backend connections, backend requests per second and
// convergence time.
func directVsRegistrar(ctx context.Context, e *env, o options) ([]result, error) {
	var rows []result
	for _, mode := range []string{"direct", "registrar"} {
		r, err := agentsRun(ctx, e, o, mode)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func agentsRun(ctx context.Context, e *env, o options, mode string) ([]result, error) {
	e.scenario("agents-" + mode)
	baseConns, err := etcdConns(e)
	if err != nil {
		return nil, err
	}
	open := func() (registry.Registry, error) { return e.backend(ctx) }
	if mode == "registrar" {
		b, err := e.backend(ctx)
		if err != nil {
			return nil, err
		}
		defer closeQuietly(b)
		srv, err := startRegistrar(b, nil)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		open = func() (registry.Registry, error) {
			return client.New(client.Options{Addresses: []string{srv.Addr().String()}})
		}
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	agents := make([]*agent, o.agents)
	for i := range agents {
		r, err := open()
		if err != nil {
			return nil, err
		}
		defer closeQuietly(r)
		agents[i] = &agent{r: r, seen: map[string]time.Time{}}
		if err := agents[i].follow(actx); err != nil {
			return nil, err
		}
		own := endpoint.Endpoint{Cluster: "east", Service: "node", Protocol: "http", Address: fmt.Sprintf("10.1.%d.%d", i/256, i%256), Port: 80, Priority: 1}
		if err := r.Apply(ctx, []registry.Op{registry.Register(own)}); err != nil {
			return nil, err
		}
	}
	conns, err := etcdConns(e)
	if err != nil {
		return nil, err
	}
	// The measured window: writes by random agents every 50ms, and every agent
	// rebuilding its view from List once a second.
	const window = 5 * time.Second
	reqBefore := e.etcdRequests()
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			time.Sleep(time.Duration(i) * window / 5 / time.Duration(len(agents))) // spread the rebuilds
			for time.Since(t0) < window {
				_, _ = a.r.List(ctx, endpoint.Filter{})
				<-tick.C
			}
		}()
	}
	n := 0
	for time.Since(t0) < window {
		a := agents[n%len(agents)]
		e := endpoint.Endpoint{Cluster: "east", Service: "churn", Protocol: "http", Address: fmt.Sprintf("10.2.%d.%d", n/256, n%256), Port: 80, Priority: 1}
		if err := a.r.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
			return nil, err
		}
		n++
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	reqRate := (e.etcdRequests() - reqBefore) / time.Since(t0).Seconds()
	// Convergence: one more write, and how long until every agent has seen it.
	probe := endpoint.Endpoint{Cluster: "east", Service: "probe", Protocol: "http", Address: "10.3.0.1", Port: 80, Priority: 1}
	p0 := time.Now()
	if err := agents[0].r.Apply(ctx, []registry.Op{registry.Register(probe)}); err != nil {
		return nil, err
	}
	var worst time.Duration
	deadline := time.Now().Add(time.Minute)
	for _, a := range agents {
		for {
			if at, ok := a.sawAt(probe.Address); ok {
				worst = max(worst, at.Sub(p0))
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("agents did not converge within a minute")
			}
			time.Sleep(time.Millisecond)
		}
	}
	label := map[string]string{"direct": "agents → etcd", "registrar": "agents → registrar → etcd"}[mode]
	setup := fmt.Sprintf("%d agents, %s; %d writes over %s, each agent Lists once a second", o.agents, label, n, window)
	return []result{
		{scenario: "Backend connections (" + label + ")", setup: setup, value: strconv.Itoa(conns - baseConns)},
		{scenario: "Backend requests/s (" + label + ")", setup: setup, value: fmt.Sprintf("%.0f", reqRate)},
		{scenario: "Convergence: write until all agents have it (" + label + ")", setup: setup, value: ms(worst)},
	}, nil
}

// embeddedEtcdRequests is the number of gRPC messages the embedded etcd has
// received: its own grpc-prometheus series, in the default registry.
func embeddedEtcdRequests() float64 {
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == "grpc_server_msg_received_total" {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// etcdConns counts established TCP connections to the etcd client port, from
// /proc/net/tcp: the backend connections, measured rather than assumed.
func etcdConns(e *env) (int, error) {
	ep := e.endpoints[0]
	port, err := strconv.Atoi(ep[strings.LastIndex(ep, ":")+1:])
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// local_address rem_address st: a client's side has the etcd port remote.
			if len(fields) > 3 && strings.HasSuffix(fields[2], want) && fields[3] == "01" {
				n++
			}
		}
		f.Close()
	}
	return n, nil
}
