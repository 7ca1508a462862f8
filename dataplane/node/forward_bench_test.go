package node_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// BenchmarkForward moves 1 KiB messages from a PublishStream client of a/n1 to a
// Subscribe client of the last group's n1, as bench/dataplane's throughput run does,
// with at most 4096 in flight: across one link, and across a chain of three (two nodes
// that only forward), on each link transport. Everything runs in this process, so
// allocs/op is every allocation per message on the whole path (clients, the nodes,
// gRPC), and cpu-ns/op the process's CPU time (user + system) per message: both less
// noisy than wall time on a shared machine. The chain's cost less one hop's is what
// two forwarding nodes and two more links add.
func BenchmarkForward(b *testing.B) {
	for _, tr := range []string{node.TransportGRPC, node.TransportFramed} {
		b.Run("one-hop/"+tr, func(b *testing.B) {
			benchmarkForward(b, tr, "links:\n  - group: a\n    neighbors: [b]\n", "a", "b")
		})
		b.Run("chain/"+tr, func(b *testing.B) { benchmarkForward(b, tr, chain, "a", "b", "c", "d") })
	}
}

func benchmarkForward(b *testing.B, transport, topology string, groups ...string) {
	f := startFabricB(b, topology, transport, groups...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubCC, subCC := dialB(b, f.Node("a/n1").Addr()), dialB(b, f.Node(groups[len(groups)-1]+"/n1").Addr())
	name, _ := node.ParseName("bench/dp/one")
	np := node.NameProto(name)
	st, err := nodev1.NewNodeServiceClient(subCC).Subscribe(ctx, &nodev1.SubscribeRequest{Name: np})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			got.Add(int64(len(r.GetMessages())))
		}
	}()
	pub, err := nodev1.NewNodeServiceClient(pubCC).PublishStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	batch := make([]*nodev1.PublishRequest, 0, 64)
	send := func(k int) {
		for i := range k {
			batch = append(batch, &nodev1.PublishRequest{Name: np, Payload: payload})
			if len(batch) == cap(batch) || i == k-1 {
				if err := pub.Send(&nodev1.PublishBatch{Messages: batch}); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	// Warm up until the route carries messages.
	deadline := time.Now().Add(30 * time.Second)
	for got.Load() == 0 {
		if time.Now().After(deadline) {
			b.Fatal("no message crossed the link within 30s")
		}
		send(1)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	base := got.Load()
	cpu0, sys0 := cpuTime(), syscalls()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		for int64(sent)-(got.Load()-base) >= 4096 {
			time.Sleep(20 * time.Microsecond)
		}
		k := min(64, b.N-sent)
		send(k)
		sent += k
	}
	for got.Load()-base < int64(b.N) {
		if time.Now().After(deadline.Add(time.Minute)) {
			b.Fatalf("%d of %d messages arrived", got.Load()-base, b.N)
		}
		time.Sleep(20 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	if sys0 >= 0 {
		b.ReportMetric(float64(syscalls()-sys0)/float64(b.N), "rw-syscalls/op")
	}
	cancel()
	<-done
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syscalls is the count of read and write system calls the process made (-1 when
// /proc/self/io cannot tell).
func syscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseInt(v, 10, 64)
			n += x
		}
	}
	return n
}

func startFabricB(b *testing.B, topology, transport string, groups ...string) *fabric.Fabric {
	b.Helper()
	f, err := fabric.Start(context.Background(), fabric.Options{Topology: topology, Logger: testLogger(),
		Node: func(c *node.Config) { c.LinkTransport = transport }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.StartGroups(ctx, 1, groups...); err != nil {
		b.Fatal(err)
	}
	return f
}

// dialB dials a node with the options its heavy clients use (node.ClientOptions).
func dialB(b *testing.B, addr string) *grpc.ClientConn {
	b.Helper()
	cc, err := grpc.NewClient(addr, append(node.ClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	return cc
}
