package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/ccmref"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// The side-by-side comparison with NATS KV is the program in bench/jetstream; these
// benchmarks isolate the backend's own costs for profiling.

const benchEntries, benchServices = 10000, 100

func benchEndpoints(n int) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = endpoint.Endpoint{
			Cluster: "prod", Service: fmt.Sprintf("svc%03d", i%benchServices), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 8080,
			Node: fmt.Sprintf("node-%d", i%500), Priority: 1, Weight: 10,
			Annotations: map[string]string{"pad": strings.Repeat("x", 40)},
		}
	}
	return eps
}

func benchRegistry(b *testing.B, lookup string, n int) *registry.Front {
	b.Helper()
	r, _, _ := benchStream(b, lookup, n)
	return r
}

// benchStream is benchRegistry that also returns the connection and the stream.
func benchStream(b *testing.B, lookup string, n int) (*registry.Front, *nats.Conn, sbjs.StreamConfig) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	b.Cleanup(cancel)
	srv, err := embednats.Start(ctx, embednats.Options{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc := connectB(b, srv.ClientURL())
	cfg := freshStream()
	r, err := sbjs.New(ctx, nc, sbjs.Options{Stream: cfg, CreateStream: true, Lookup: lookup})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	if n > 0 {
		ops := make([]registry.Op, 0, n)
		for _, e := range benchEndpoints(n) {
			ops = append(ops, registry.Register(e))
		}
		if err := r.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	return r, nc, cfg
}

func BenchmarkApply10k(b *testing.B) {
	r := benchRegistry(b, sbjs.LookupConsumer, 0)
	eps := benchEndpoints(benchEntries)
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if err := r.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ops))/b.Elapsed().Seconds(), "entries/s")
	// The process's CPU (this client and the embedded server together) per entry moves
	// less with the machine's load than the rate does.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*len(ops)), "cpu-ns/entry")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchList(b *testing.B, lookup, path string, f endpoint.Filter, want int) {
	benchListEach(b, lookup, path, f, want, func(*registry.Front) {})
}

// benchListEach is benchList running before(r) outside the timer before every List.
func benchListEach(b *testing.B, lookup, path string, f endpoint.Filter, want int, before func(*registry.Front)) {
	r := benchRegistry(b, lookup, benchEntries)
	if path != "" {
		sbjs.ForceReadPath(r, path)
	}
	ctx := context.Background()
	b.ResetTimer()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		before(r)
		b.StartTimer()
		cpu0 := processCPU()
		eps, err := r.List(ctx, f)
		cpu += processCPU() - cpu0
		if err != nil || len(eps) != want {
			b.Fatalf("List = %d entries, %v; want %d", len(eps), err, want)
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

var benchService = endpoint.Filter{Service: "svc042"}

func BenchmarkListAll10kConsumer(b *testing.B) {
	benchList(b, sbjs.LookupConsumer, "", endpoint.Filter{}, benchEntries)
}

// BenchmarkListAll10kCold is the first full lookup of a registry: every payload is
// decoded.
func BenchmarkListAll10kCold(b *testing.B) {
	benchListEach(b, sbjs.LookupConsumer, "", endpoint.Filter{}, benchEntries, sbjs.MakeFirst)
}
func BenchmarkListAll10kDirect(b *testing.B) {
	benchList(b, sbjs.LookupDirect, "", endpoint.Filter{}, benchEntries)
}

// BenchmarkListService10k is the default lookup of one service: multi_last checked
// against the leader's last sequence.
func BenchmarkListService10k(b *testing.B) {
	benchList(b, sbjs.LookupConsumer, "", benchService, benchEntries/benchServices)
}
func BenchmarkListService10kConsumer(b *testing.B) {
	benchList(b, sbjs.LookupConsumer, "consumer", benchService, benchEntries/benchServices)
}

// BenchmarkListService10kDirect is --lookup direct: multi_last, any replica's view.
func BenchmarkListService10kDirect(b *testing.B) {
	benchList(b, sbjs.LookupDirect, "", benchService, benchEntries/benchServices)
}
func BenchmarkListService10kDirectSeq(b *testing.B) {
	benchList(b, sbjs.LookupDirect, "direct", benchService, benchEntries/benchServices)
}

// BenchmarkListService10kCCM is the reference for the one-service lookup: CCM's own,
// one batched direct get of the last message of every subject matching the filter
// (multi_last), decoded with encoding/json into CCM's entry shape, markers dropped,
// sorted by address then port.
func BenchmarkListService10kCCM(b *testing.B) {
	_, nc, cfg := benchStream(b, sbjs.LookupDirect, benchEntries)
	filter := cfg.Prefix + ".*.*.svc042.*.*"
	want := benchEntries / benchServices
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		out, err := ccmref.Lookup(ctx, nc, cfg.Name, filter, want+1)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != want {
			b.Fatalf("read %d entries, want %d", len(out), want)
		}
	}
}

func BenchmarkWatchInitial10k(b *testing.B) {
	r := benchRegistry(b, sbjs.LookupConsumer, benchEntries)
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := r.Watch(ctx, endpoint.Filter{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for ev := range ch {
			if ev.Type == registry.Synced {
				break
			}
			n++
		}
		cancel()
		for range ch {
		}
		if n != benchEntries {
			b.Fatalf("watch sent %d entries before Synced, want %d", n, benchEntries)
		}
	}
}
