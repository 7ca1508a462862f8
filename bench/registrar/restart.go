package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// restartCase is one size of the restart scenario: the reconnect storm of a
// registrar restart in which no endpoint changed, which the state digest in every
// token turns into resumes (docs/registrar.md, "Resuming across a restart").
type restartCase struct {
	watchers, conns, endpoints int
	// fromToken starts the watchers at A from A's current version, as agents that
	// have run for a while hold it, instead of each taking a full snapshot from A
	// (at 10,000 × 100,000 that would be the storm10k scenario all over again).
	fromToken bool
	goal      time.Duration
}

// restart holds watchers (in a child process) on registrar A over etcd, stops A,
// starts B (a new epoch) on A's address and the same etcd prefix, and times the
// watchers' reconnection with the tokens A gave them until every one has its
// SNAPSHOT_COMPLETE, counting the resumed ones, and samples the peak RSS of the
// process B runs in.
func restart(ctx context.Context, e *env, c restartCase) ([]result, error) {
	a, stop, err := e.preloaded(ctx, fmt.Sprintf("restart%d", c.watchers), c.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	address, tok := a.Addr().String(), ""
	if c.fromToken {
		if tok, err = currentVersion(ctx, address); err != nil {
			return nil, err
		}
	}
	var b *server
	var bReady time.Duration
	var peak func() int64
	rssBefore := rss()
	var out []int64
	err = runChild(ctx, []string{"-role", "restart-watchers", "-target", address, "-token", tok,
		"-watchers", fmt.Sprint(c.watchers), "-conns", fmt.Sprint(c.conns)}, func() error {
		t0 := time.Now()
		a.stop()
		peak = sampleRSS()
		backend, err := e.backend(ctx) // B's own connection, on the same prefix
		if err != nil {
			return err
		}
		b, err = startRegistrarAt(address, backend, nil)
		bReady = time.Since(t0)
		return err
	}, &out)
	if b != nil {
		defer b.stop()
	}
	if peak != nil {
		defer peak()
	}
	if err != nil {
		return nil, err
	}
	if len(out) != 3 {
		return nil, fmt.Errorf("restart child printed %v", out)
	}
	return restartRows(c, e.benchProcess(), time.Duration(out[0]), out[1], out[2], bReady, peak(), rssBefore), nil
}

func restartRows(c restartCase, holds string, took time.Duration, resumed, full int64, bReady time.Duration, peak, before int64) []result {
	start := "full snapshots from A"
	if c.fromToken {
		start = "resumed at A from its current version"
	}
	what := fmt.Sprintf("%d watchers / %d conns (separate process, %s, %s) × %d endpoints, etcd", c.watchers, c.conns, start, transport.String(), c.endpoints)
	rows := []result{
		{scenario: "Restart, nothing changed: from stopping A until B (new epoch) is ready (B reads the backend)", setup: what, value: ms(bReady)},
		{scenario: "Restart, nothing changed: every watcher has SNAPSHOT_COMPLETE from B", setup: what,
			value: fmt.Sprintf("%s (%d resumed, %d full snapshots)", ms(took), resumed, full)},
		{scenario: "Restart, nothing changed: peak RSS of B's process (" + holds + ")", setup: what,
			value: fmt.Sprintf("%.0f MiB (%.0f MiB before)", float64(peak)/(1<<20), float64(before)/(1<<20)), goal: "bounded (reported)"},
	}
	if c.goal > 0 {
		// The row counts only if every watcher resumed.
		rows[1].goal, rows[1].ok, rows[1].anchor = "≤ "+ms(c.goal)+", all resumed", ptr(took <= c.goal && full == 0), "storm10k: 64–164 s"
	}
	return rows
}

// currentVersion is the registrar's current version, from a listing of nothing.
func currentVersion(ctx context.Context, address string) (string, error) {
	conns, err := dialN(address, 1)
	if err != nil {
		return "", err
	}
	defer closeAll(conns)
	resp, err := registrarv1.NewRegistrarClient(conns[0]).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"})
	return resp.GetVersion(), err
}

// sampleRSS samples this process's resident set every 10 ms until the returned
// function is called, which returns the peak; calling it again returns it again.
func sampleRSS() (peakRSS func() int64) {
	var peak atomic.Int64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			atomicMax(&peak, rss())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(stop); <-stopped })
		return peak.Load()
	}
}

// restartWatchers is the restart child. It opens n watchers at the registrar at
// target from tok (none: full snapshots), keeping each one's version, says ready,
// waits until the registrar stops (every stream ended) and another registrar (a
// new epoch) answers on every connection, then reconnects all at once, each with
// its own token. It prints how long until every one had its SNAPSHOT_COMPLETE
// (nanoseconds), how many were resumed and how many took a full snapshot.
func restartWatchers(target string, n, conns int, tok string) error {
	if transport.watcher == "h2" {
		return h2RestartWatchers(target, n, conns, tok)
	}
	cs, ctx, done, err := childConns(target, conns)
	if err != nil {
		return err
	}
	defer done()
	before, err := answered(ctx, cs, "")
	if err != nil {
		return err
	}
	var ended sync.WaitGroup
	first, err := watchAll(ctx, cs, slices.Repeat([]string{tok}, n), &ended)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	if err := waitGroup(&ended, 5*time.Minute); err != nil {
		return fmt.Errorf("the first registrar's streams did not end: %w", err)
	}
	if _, err := answered(ctx, cs, before); err != nil {
		return err
	}
	again, err := watchAll(ctx, cs, first.versions, &ended)
	if err != nil {
		return err
	}
	fmt.Println(int64(again.took))
	fmt.Println(again.resumed)
	fmt.Println(int64(n) - again.resumed)
	return nil
}

// answered waits until every connection is answered by a registrar of another
// epoch than version old's (any, if old is empty), and returns its version.
func answered(ctx context.Context, cs []*grpc.ClientConn, old string) (string, error) {
	was, _ := token.Parse(old)
	deadline := time.Now().Add(5 * time.Minute)
	var v string
	for _, c := range cs {
		for {
			resp, err := registrarv1.NewRegistrarClient(c).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"}, grpc.WaitForReady(true))
			if err == nil {
				now, perr := token.Parse(resp.GetVersion())
				if perr != nil {
					return "", perr
				}
				if old == "" || now.Epoch != was.Epoch {
					v = resp.GetVersion()
					break
				}
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("no new registrar answered within 5m (last error %v)", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return v, nil
}

// watched is what watchAll found.
type watched struct {
	versions []string // each stream's SNAPSHOT_COMPLETE version
	resumed  int64    // streams whose SNAPSHOT_COMPLETE said resumed
	took     time.Duration
}

// watchAll opens one raw watch stream per token at once, spread over cs, and reads
// each one's initial phase; then each stream is read until it ends, which it
// reports to ended.
func watchAll(ctx context.Context, cs []*grpc.ClientConn, tokens []string, ended *sync.WaitGroup) (watched, error) {
	w := watched{versions: make([]string, len(tokens))}
	var resumed atomic.Int64
	errs := make(chan error, len(tokens))
	var wg sync.WaitGroup
	wg.Add(len(tokens))
	ended.Add(len(tokens))
	start := time.Now()
	for i, tok := range tokens {
		go func() {
			defer ended.Done()
			st, err := rawWatch(ctx, cs[i%len(cs)], fmt.Sprintf("w%d", i), tok)
			var done *registrarv1.EndpointEvent
			if err == nil {
				done, err = completion(st)
			}
			if err != nil {
				errs <- err
				wg.Done()
				return
			}
			w.versions[i] = done.GetVersion()
			if done.GetResumed() {
				resumed.Add(1)
			}
			wg.Done()
			for st.RecvMsg(new([]byte)) == nil {
			}
		}()
	}
	wg.Wait()
	w.took, w.resumed = time.Since(start), resumed.Load()
	close(errs)
	return w, <-errs
}

// completion reads a stream's initial phase and returns its SNAPSHOT_COMPLETE.
func completion(st grpc.ClientStream) (*registrarv1.EndpointEvent, error) {
	complete := []byte{byte(protowire.EncodeTag(wire.EventFieldType, protowire.VarintType)), byte(registrarv1.EndpointEvent_SNAPSHOT_COMPLETE)}
	for {
		var b []byte
		if err := st.RecvMsg(&b); err != nil {
			return nil, err
		}
		if len(b) >= 2 && b[0] == complete[0] && b[1] == complete[1] {
			ev := &registrarv1.EndpointEvent{}
			return ev, proto.Unmarshal(b, ev)
		}
	}
}
