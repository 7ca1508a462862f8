package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// verdict is the final check's outcome: per source (the backend, each client's
// cache, each watcher's map, the fleet), what disagrees with the oracle.
type verdict struct {
	problems map[string][]string
	after    time.Duration // from the start of the check to agreement, or to giving up
	// What the backend holds against the oracle, at the last look or during the
	// steady watch after agreement (see tally): lost acknowledged entries, entries
	// unregistered by their agent found again, entries nobody wrote.
	lost, resurrected, stray int
	want                     int // endpoints the oracle expects
	steady                   time.Duration
}

func (v verdict) ok() bool { return len(v.problems) == 0 }

// check polls every source until all agree with the oracle or within passes; the
// last disagreement of each source is the verdict. Once they agree, the backend is
// watched for steady more: what a replica's restore loop, a late takeover or a
// removal of a gone session's entries changes there after agreement shows.
func (s *system) check(within, steady time.Duration) verdict {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within+steady+30*time.Second)
	defer cancel()
	want := s.oracle.snapshot()
	direct, openErr := s.openDirect(ctx, within)
	if openErr == nil {
		defer direct.Close()
	}
	var v verdict
	agreed := false
	for {
		v = verdict{problems: map[string][]string{}, want: len(want)}
		if openErr != nil {
			v.problems["backend"] = []string{"open directly: " + openErr.Error()}
		} else {
			s.checkBackend(ctx, direct, want, &v, "backend")
		}
		for _, a := range s.agents {
			eps, err := a.c.List(ctx, endpoint.Filter{})
			name := "client cache of agent-" + strconv.Itoa(a.id)
			if err != nil {
				v.problems[name] = []string{"list: " + err.Error()}
				continue
			}
			got, dups := byKey(eps)
			if d := append(dups, lines(diff(want, got), nil)...); len(d) > 0 {
				v.problems[name] = d
			}
		}
		for _, w := range s.watchers {
			eps, err := w.c.List(ctx, endpoint.Filter{})
			name := "client cache of watcher-" + strconv.Itoa(w.id)
			if err != nil {
				v.problems[name] = []string{"list: " + err.Error()}
			} else {
				got, dups := byKey(eps)
				if d := append(dups, lines(diff(want, got), nil)...); len(d) > 0 {
					v.problems[name] = d
				}
			}
			m, synced := w.view()
			name = "watch map of watcher-" + strconv.Itoa(w.id)
			if d := lines(diff(want, m), nil); len(d) > 0 || !synced {
				if !synced {
					d = append([]string{"never got Synced"}, d...)
				}
				v.problems[name] = d
			}
		}
		if d := s.fleet.checkCP(ctx); len(d) > 0 {
			v.problems["data plane"] = d
		}
		v.after = time.Since(start)
		// Agreement must hold on two looks 300 ms apart: the control plane writes a
		// change in several steps, and one agreeing look can fall between two of them.
		switch {
		case v.ok() && agreed:
			if openErr == nil {
				s.holdsStill(ctx, direct, want, steady, &v)
			}
			return v
		case v.ok():
			agreed = true
		case v.after > within:
			return v
		default:
			agreed = false
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkBackend lists the backend and puts what disagrees with want into v, under
// name, counted as lost, resurrected or stray.
func (s *system) checkBackend(ctx context.Context, direct registry.Registry, want map[endpoint.Key]endpoint.Endpoint, v *verdict, name string) {
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	eps, err := direct.List(lctx, endpoint.Filter{})
	lcancel()
	if err != nil {
		v.problems[name] = []string{"list: " + err.Error()}
		return
	}
	got, dups := byKey(eps)
	ms := diff(want, got)
	explain := func(k endpoint.Key) string { return s.oracle.describe(k, s.start) }
	if d := append(dups, lines(ms, explain)...); len(d) > 0 {
		v.problems[name] = d
		v.lost, v.resurrected, v.stray = tally(ms, s.oracle.written)
	}
}

// holdsStill looks at the backend every second for d after agreement; the first
// disagreement ends the watch and makes the verdict.
func (s *system) holdsStill(ctx context.Context, direct registry.Registry, want map[endpoint.Key]endpoint.Endpoint, d time.Duration, v *verdict) {
	v.steady = d
	for end := time.Now().Add(d); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		s.checkBackend(ctx, direct, want, v, "backend after agreement")
		if !v.ok() {
			v.problems["backend after agreement"] = append([]string{
				fmt.Sprintf("changed %s after every source agreed", (d - time.Until(end)).Round(time.Second))}, v.problems["backend after agreement"]...)
			return
		}
	}
}

// openDirect opens the backend the way any reader would, bypassing the registrars.
func (s *system) openDirect(ctx context.Context, within time.Duration) (registry.Registry, error) {
	params := map[string]string{}
	switch s.backend {
	case "etcd":
		params["etcd-endpoints"] = s.backendURLs()
	case "jetstream":
		params["nats-url"] = s.backendURLs()
	}
	deadline := time.Now().Add(within)
	for {
		r, err := registry.Open(ctx, s.backend, params, nil)
		switch {
		case err == nil:
			return r, nil
		case time.Now().After(deadline):
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (v verdict) String() string {
	if v.ok() {
		return fmt.Sprintf("every source agrees with the oracle (%d endpoints) and every link and route is applied exactly once, %s after the check began; the backend then held still for %s",
			v.want, v.after.Round(time.Millisecond), v.steady)
	}
	names := make([]string, 0, len(v.problems))
	for n := range v.problems {
		names = append(names, n)
	}
	sort.Strings(names)
	out := fmt.Sprintf("still disagreeing %s after the check began (oracle: %d endpoints):", v.after.Round(time.Millisecond), v.want)
	for _, n := range names {
		out += fmt.Sprintf("\n  %s (%d):\n    %s", n, len(v.problems[n]), summarize(v.problems[n], 12))
	}
	return out
}

// sabotage breaks the final state the way a defect would, without telling anyone:
// the oracle expects one endpoint nobody wrote (an acknowledged entry lost: with
// liveness on, one deleted from the backend comes back by the replica's restore),
// one endpoint its agent unregistered is put back straight into the backend (a
// resurrection), and one node's datapath gets a connection the control plane never
// asked for. A checker that lets this pass is broken.
func (s *system) sabotage() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ghost := endpoint.Endpoint{Cluster: "east", Service: "svc0", Protocol: "http", Address: "10.99.0.1", Port: 8080, Node: "sabotage", Priority: 1}
	s.log.Warn("sabotage: the oracle expects an endpoint nobody wrote", "key", ghost.Key().String())
	s.oracle.expect(ghost)
	if e, ok := s.oracle.removed(); ok {
		direct, err := s.openDirect(ctx, 10*time.Second)
		if err != nil {
			return err
		}
		defer direct.Close()
		e.TTL = 0 // nobody refreshes it, and it must stay
		s.log.Warn("sabotage: registering an unregistered endpoint again behind the registrars' back", "key", e.Key().String())
		if err := direct.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
			return err
		}
	}
	n := s.fleet.nodes[0]
	s.log.Warn("sabotage: a stray connection", "node", n.ID())
	_, err := n.Datapath().Connect(ctx, "sabotage-link", "192.0.2.1:443", []byte("{}"))
	return err
}
