package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// lossWatch follows one cluster's endpoints from another cluster's registrar and
// remembers every expected entry it stopped seeing since the last mark.
type lossWatch struct {
	cluster  int
	expected []string
	mu       sync.Mutex
	visible  map[string]bool
	vanished map[string]bool
	synced   map[int]bool // the watches (one per service) that have had their initial state
}

func (w *lossWatch) mark() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.vanished = map[string]bool{}
}

// apply takes an event of watch i.
func (w *lossWatch) apply(i int, ev registry.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := ev.Endpoint.Key().String()
	switch ev.Type {
	case registry.Added, registry.Updated:
		w.visible[k] = true
	case registry.Removed:
		delete(w.visible, k)
		w.vanished[k] = true
	case registry.Synced:
		w.synced[i] = true
	}
}

// lossReport is an agents process's answer to "report".
type lossReport struct {
	Cluster    string   `json:"cluster"` // the cluster watched
	Expected   int      `json:"expected"`
	Visible    int      `json:"visible"`
	Lost       int      `json:"lost"`
	LostSample []string `json:"lost_sample,omitempty"`
	// GapMs is the longest time between two acknowledged writes of this process
	// since the mark; Failures counts failed write batches since then.
	GapMs    int64 `json:"gap_ms"`
	Failures int   `json:"failures"`
}

func (f *fleetAgents) report() lossReport {
	w := f.loss
	w.mu.Lock()
	lost := lostEntries(w.expected, w.vanished, w.visible)
	r := lossReport{Cluster: clusterName(w.cluster), Expected: len(w.expected), Visible: len(w.visible), Lost: len(lost)}
	w.mu.Unlock()
	r.LostSample = lost[:min(len(lost), 5)]
	f.mu.Lock()
	defer f.mu.Unlock()
	gap := f.maxGap
	if !f.markAt.IsZero() {
		gap = max(gap, time.Since(f.lastAck)) // a gap still open counts
	}
	r.GapMs, r.Failures = gap.Milliseconds(), f.failures
	return r
}

// startWatchers opens the loss watcher and the probe watcher on a client of their
// own, which starts on the last replica: a replica-loss phase kills the first, and
// the watcher that must see the loss should not be the one re-homing.
func (f *fleetAgents) startWatchers(ctx context.Context) error {
	addrs := strings.Split(f.cfg.registrars, ",")
	last := len(addrs) - 1
	c, err := client.New(client.Options{
		Addresses: append(append([]string(nil), addrs[last:]...), addrs[:last]...), InOrder: true, Scoped: true,
		Node: "watcher-" + f.cfg.cluster, Cluster: f.cfg.cluster, Logger: f.log.With("client", "watcher"),
	})
	if err != nil {
		return err
	}
	f.watcher = c
	wc := f.cfg.watched()
	f.loss = &lossWatch{cluster: wc, expected: expectedKeys(wc, f.cfg.endpoints, f.cfg.perAgent),
		visible: map[string]bool{}, vanished: map[string]bool{}, synced: map[int]bool{}}
	// One watch per service of the watched cluster, as a scoped agent asks: a
	// registrar that holds only what is demanded serves them.
	var lossChs []<-chan registry.Event
	for s := range services {
		ch, err := c.Watch(ctx, endpoint.Filter{Cluster: clusterName(wc), Service: serviceName(wc, s)})
		if err != nil {
			return err
		}
		lossChs = append(lossChs, ch)
	}
	probeCh, err := c.Watch(ctx, endpoint.Filter{Service: probeService})
	if err != nil {
		return err
	}
	for i, ch := range lossChs {
		go func() {
			for ev := range ch {
				f.loss.apply(i, ev)
			}
		}()
	}
	go f.watchProbes(probeCh)
	return f.waitWatched(ctx)
}

// waitWatched waits (two minutes at most) until the loss watcher has its initial
// state: every agents process registers at once, so the watched cluster may still
// be registering; the parent checks the counts later.
func (f *fleetAgents) waitWatched(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		f.loss.mu.Lock()
		synced := len(f.loss.synced)
		f.loss.mu.Unlock()
		if synced == services {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("loss watcher of %s not synced within 2m", clusterName(f.loss.cluster))
}

// watchProbes reports every probe change of another cluster (or of its own, in a
// fleet of one) with the time it arrived here, naming this (the watching) cluster.
func (f *fleetAgents) watchProbes(ch <-chan registry.Event) {
	own := clusterName(f.cfg.index)
	for ev := range ch {
		if ev.Type != registry.Added && ev.Type != registry.Updated {
			continue
		}
		if ev.Endpoint.Cluster == own && f.cfg.clusters > 1 {
			continue
		}
		if id := ev.Endpoint.Annotations["change"]; id != "" {
			f.out.println("seen %s %s %d", own, id, time.Now().UnixNano())
		}
	}
}
