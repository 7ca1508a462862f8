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
	lost     int           // acknowledged writes the backend does not hold
	want     int           // endpoints the oracle expects
}

func (v verdict) ok() bool { return len(v.problems) == 0 }

// check polls every source until all agree with the oracle or within passes; the
// last disagreement of each source is the verdict.
func (s *system) check(within time.Duration) verdict {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within+30*time.Second)
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
			lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
			eps, err := direct.List(lctx, endpoint.Filter{})
			lcancel()
			if err != nil {
				v.problems["backend"] = []string{"list: " + err.Error()}
			} else {
				got, dups := byKey(eps)
				ms := diff(want, got)
				explain := func(k endpoint.Key) string { return s.oracle.describe(k, s.start) }
				if d := append(dups, lines(ms, explain)...); len(d) > 0 {
					v.problems["backend"] = d
					v.lost = len(ms)
				}
			}
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
		return fmt.Sprintf("every source agrees with the oracle (%d endpoints) and every link and route is applied exactly once, %s after the check began", v.want, v.after.Round(time.Millisecond))
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
// one endpoint the oracle expects is deleted straight from the backend, and one
// node's datapath gets a connection the control plane never asked for. A checker
// that lets this pass is broken.
func (s *system) sabotage() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := s.oracle.snapshot()
	direct, err := s.openDirect(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	defer direct.Close()
	for _, e := range want {
		s.log.Warn("sabotage: unregistering behind the registrars' back", "key", e.Key().String())
		if err := direct.Apply(ctx, []registry.Op{registry.Unregister(e)}); err != nil {
			return err
		}
		break
	}
	n := s.fleet.nodes[0]
	s.log.Warn("sabotage: a stray connection", "node", n.ID())
	_, err = n.Datapath().Connect(ctx, "sabotage-link", "192.0.2.1:443", []byte("{}"))
	return err
}
