// Command jetstream benchmarks the JetStream registry backend side by side with NATS's
// own KV (jetstream.KeyValue) doing the same work against the same embedded server:
// publish rate, full lookup, one-service lookup and initial watch delivery.
//
//	go run ./bench/jetstream -entries 10000 -services 100 -size 200
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/bench/internal/hostspeed"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

type config struct {
	entries, services, size, runs, rounds int
	memory                                bool
	out                                   string
}

func main() {
	var c config
	flag.IntVar(&c.entries, "entries", 10000, "number of entries")
	flag.IntVar(&c.services, "services", 100, "services the entries are spread over")
	flag.IntVar(&c.size, "size", 200, "approximate payload size in bytes")
	flag.IntVar(&c.runs, "runs", 7, "repetitions of each lookup (the median is reported)")
	flag.IntVar(&c.rounds, "rounds", 3, "publish rounds, each into fresh streams (the median is reported)")
	flag.BoolVar(&c.memory, "memory", false, "memory storage instead of file")
	flag.StringVar(&c.out, "out", "", "also write the markdown table to this file")
	flag.Parse()
	if c.entries < 1 || c.services < 1 || c.runs < 1 || c.rounds < 1 {
		fmt.Fprintln(os.Stderr, "entries, services, runs and rounds must be positive")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		log.Fatal(err)
	}
}

func run(c config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "switchboard-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	srv, err := embednats.Start(ctx, embednats.Options{StoreDir: dir})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	b := &bench{c: c, nc: nc, eps: entries(c)}
	if b.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192)); err != nil {
		return err
	}
	before, err := hostspeed.Measure()
	if err != nil {
		return err
	}
	t, err := b.measure(ctx)
	if err != nil {
		return err
	}
	if t.host[1], err = hostspeed.Measure(); err != nil {
		return err
	}
	t.host[0] = before
	var w io.Writer = os.Stdout
	if c.out != "" {
		f, err := os.Create(c.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	t.write(w, c)
	return nil
}

// entries builds the endpoints, padded with an annotation to about c.size bytes of
// JSON each.
func entries(c config) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, c.entries)
	for i := range eps {
		e := endpoint.Endpoint{
			Cluster: "prod", Service: fmt.Sprintf("svc%03d", i%c.services), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 8080,
			Node: fmt.Sprintf("node-%d", i%500), Priority: 1, Weight: 10,
		}
		raw, _ := e.MarshalJSON()
		if pad := c.size - len(raw) - len(`,"annotations":{"pad":""}`); pad > 0 {
			e.Annotations = map[string]string{"pad": strings.Repeat("x", pad)}
		}
		eps[i] = e
	}
	return eps
}

type bench struct {
	c   config
	nc  *nats.Conn
	js  jetstream.JetStream
	eps []endpoint.Endpoint
}

// results holds every figure of the table.
type results struct {
	pubOurs, pubKVPut, pubKVAsync, pubKVPre, pubKVHdr                          float64 // entries/s
	fullOurs, fullCold, fullDirect, fullKVList, fullKVWatch, fullKVWatchDecode time.Duration
	fullKVWatchHdr                                                             time.Duration
	oneOurs, oneDirect, oneKVWatch, oneCCM                                     time.Duration
	watchOurs                                                                  time.Duration
	// The process's CPU (this client and the embedded server) per full lookup: on a
	// shared machine it moves less with the load than the wall times do.
	cpuOurs, cpuCold, cpuKVWatch time.Duration
	payload                      int
	// How fast the host was before and after (hostspeed).
	host [2]hostspeed.Reading
}

func (b *bench) measure(ctx context.Context) (*results, error) {
	res := &results{}
	raw, _ := b.eps[0].MarshalJSON()
	res.payload = len(raw)
	rates := map[string][]float64{}
	var last *round
	for i := range b.c.rounds {
		rd, err := b.publishRound(ctx, i, rates)
		if last != nil {
			last.close()
		}
		if err != nil {
			return nil, err
		}
		last = rd
	}
	defer last.close()
	res.pubOurs, res.pubKVPut, res.pubKVAsync = mid(rates["ours"]), mid(rates["put"]), mid(rates["async"])
	res.pubKVPre, res.pubKVHdr = mid(rates["pre"]), mid(rates["hdr"])
	return res, b.lookups(ctx, last, res)
}

// round is what one publish round leaves to read: our stream (through both lookup
// strategies, and CCM's own lookup) and the KV bucket written with async publish.
type round struct {
	cfg          sbjs.StreamConfig
	ours, direct *registry.Front
	kv           jetstream.KeyValue
	kvHdr        jetstream.KeyValue // written with the header ours carry
}

func (rd *round) close() {
	_ = rd.ours.Close()
	_ = rd.direct.Close()
}

// publishRound writes every entry once per writer, each into a fresh stream or
// bucket, the writers in a shuffled order so that none always meets the server in
// the same state.
func (b *bench) publishRound(ctx context.Context, i int, rates map[string][]float64) (*round, error) {
	rd := &round{cfg: sbjs.StreamConfig{Name: fmt.Sprintf("BENCH%d", i), Prefix: fmt.Sprintf("bench%d.reg", i), Memory: b.c.memory}}
	var err error
	if rd.ours, err = sbjs.New(ctx, b.nc, sbjs.Options{Stream: rd.cfg, CreateStream: true}); err != nil {
		return nil, err
	}
	if rd.direct, err = sbjs.New(ctx, b.nc, sbjs.Options{Stream: rd.cfg, Lookup: sbjs.LookupDirect}); err != nil {
		_ = rd.ours.Close()
		return nil, err
	}
	kvAsync := func(name string, pre, headers bool) func() (float64, error) {
		return func() (float64, error) {
			bucket := fmt.Sprintf("%s%d", name, i)
			kv, err := b.bucket(ctx, bucket)
			if err != nil {
				return 0, err
			}
			switch name {
			case "ASYNC":
				rd.kv = kv
			case "HDR":
				rd.kvHdr = kv
			}
			return b.publishKVAsync(ctx, bucket, pre, headers)
		}
	}
	writers := []struct {
		name string
		fn   func() (float64, error)
	}{
		{"ours", func() (float64, error) { return b.publishOurs(ctx, rd.ours) }},
		{"put", func() (float64, error) { return b.publishKVPut(ctx, fmt.Sprintf("PUT%d", i)) }},
		{"async", kvAsync("ASYNC", false, false)},
		{"pre", kvAsync("PRE", true, false)},
		{"hdr", kvAsync("HDR", false, true)},
	}
	rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(writers), func(a, c int) { writers[a], writers[c] = writers[c], writers[a] })
	for _, w := range writers {
		rate, err := w.fn()
		if err != nil {
			rd.close()
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
		rates[w.name] = append(rates[w.name], rate)
	}
	return rd, nil
}

func (b *bench) lookups(ctx context.Context, rd *round, res *results) error {
	one := endpoint.Filter{Service: b.eps[b.c.services/2].Service}
	oneKey := "*.*." + one.Service + ".*.*"
	// The cold lookup's Registry is opened before its step is timed, closed after.
	var cold *registry.Front
	coldList := func() (int, error) {
		defer func() { _ = cold.Close() }()
		return list(ctx, cold, endpoint.Filter{})
	}
	steps := []struct {
		d      *time.Duration
		fn     func() (int, error)
		n      int
		cpu    *time.Duration // where the median CPU goes, if reported
		before func() error   // untimed, before each run of fn
	}{
		{d: &res.fullCold, fn: coldList, n: b.c.entries, cpu: &res.cpuCold, before: func() (err error) {
			cold, err = sbjs.New(ctx, b.nc, sbjs.Options{Stream: rd.cfg})
			return err
		}},
		{&res.fullOurs, func() (int, error) { return list(ctx, rd.ours, endpoint.Filter{}) }, b.c.entries, &res.cpuOurs, nil},
		{&res.fullDirect, func() (int, error) { return list(ctx, rd.direct, endpoint.Filter{}) }, b.c.entries, nil, nil},
		{&res.fullKVList, func() (int, error) { return kvListGet(ctx, rd.kv) }, b.c.entries, nil, nil},
		{&res.fullKVWatch, func() (int, error) { return kvWatch(ctx, rd.kv, ">", false) }, b.c.entries, &res.cpuKVWatch, nil},
		{&res.fullKVWatchDecode, func() (int, error) { return kvWatch(ctx, rd.kv, ">", true) }, b.c.entries, nil, nil},
		{&res.fullKVWatchHdr, func() (int, error) { return kvWatch(ctx, rd.kvHdr, ">", false) }, b.c.entries, nil, nil},
		{&res.oneOurs, func() (int, error) { return list(ctx, rd.ours, one) }, b.count(one), nil, nil},
		{&res.oneDirect, func() (int, error) { return list(ctx, rd.direct, one) }, b.count(one), nil, nil},
		{&res.oneKVWatch, func() (int, error) { return kvWatch(ctx, rd.kv, oneKey, false) }, b.count(one), nil, nil},
		{&res.oneCCM, func() (int, error) { return b.ccmLookup(ctx, rd.cfg, one.Service) }, b.count(one), nil, nil},
		{&res.watchOurs, func() (int, error) { return watchInitial(ctx, rd.ours) }, b.c.entries, nil, nil},
	}
	// The steps take turns, run by run, so that the ones compared meet the server and
	// the collector in the same states (run back to back, each step would pay for the
	// garbage the one before it left, and the cold lookups, until 2026-12-02 run
	// before the others, met the host in another state than the WatchAll they are
	// compared with); ListKeys+Get, most of a second a run, runs 3 times.
	ds, cs := make([][]time.Duration, len(steps)), make([][]time.Duration, len(steps))
	for run := range b.c.runs {
		for i, s := range steps {
			if s.d == &res.fullKVList && run >= 3 {
				continue
			}
			if s.before != nil {
				if err := s.before(); err != nil {
					return err
				}
			}
			d, cpu, err := timed(s.n, s.fn)
			if err != nil {
				return err
			}
			ds[i], cs[i] = append(ds[i], d), append(cs[i], cpu)
		}
	}
	for i, s := range steps {
		*s.d = median(ds[i])
		if s.cpu != nil {
			*s.cpu = median(cs[i])
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func mid(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func (b *bench) count(f endpoint.Filter) int {
	n := 0
	for _, e := range b.eps {
		if f.Match(e) {
			n++
		}
	}
	return n
}

// timed runs fn once after a collection, checks it saw want entries, and returns
// how long it took and the process's CPU meanwhile.
func timed(want int, fn func() (int, error)) (time.Duration, time.Duration, error) {
	runtime.GC()
	cpu0, start := processCPU(), time.Now()
	n, err := fn()
	d, cpu := time.Since(start), processCPU()-cpu0
	if err != nil {
		return 0, 0, err
	}
	if n != want {
		return 0, 0, fmt.Errorf("read %d entries, want %d", n, want)
	}
	return d, cpu, nil
}

// processCPU is the CPU this process (client and embedded server) has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
