package node_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// BenchmarkRequest makes 1 KiB requests across one link, eight in flight, each echoed
// by a responder at b/n1 (a Subscribe client answering each delivered batch over one
// RespondStream, as bench/dataplane's reqrep run does). The requests are made by a
// client of a/n1 over one RequestStream (node.Requester), or in a/n1's own process
// (Node.Request): the difference is what the requester's gRPC leg, both ways, costs a
// round trip. cpu-ns/op is the process's CPU time per request, every party included.
func BenchmarkRequest(b *testing.B) {
	b.Run("request-stream", func(b *testing.B) { benchmarkRequest(b, false) })
	b.Run("in-process", func(b *testing.B) { benchmarkRequest(b, true) })
}

func benchmarkRequest(b *testing.B, inProcess bool) {
	f := startFabricB(b, "links:\n  - group: a\n    neighbors: [b]\n", node.TransportFramed, "a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name, _ := node.ParseName("bench/dp/req")
	np := node.NameProto(name)
	echo(ctx, b, nodev1.NewNodeServiceClient(dialB(b, f.Node("b/n1").Addr())), np)
	rq, err := node.NewRequester(ctx, nodev1.NewNodeServiceClient(dialB(b, f.Node("a/n1").Addr())))
	if err != nil {
		b.Fatal(err)
	}
	defer rq.Close()
	at := f.Node("a/n1")
	payload := make([]byte, 1024)
	request := func() error {
		if inProcess {
			_, err := at.Request(ctx, name, payload, 5*time.Second)
			return err
		}
		_, err := rq.Request(ctx, &nodev1.RequestRequest{Name: np, Payload: payload, TimeoutMs: 5000})
		return err
	}
	// Until the route carries requests.
	for deadline := time.Now().Add(30 * time.Second); request() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no answer within 30s")
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	cpu0 := cpuTime()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := request(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// echo answers every request to np that reaches the node c is a client of with its
// own payload, the answers to each delivered batch in one batch.
func echo(ctx context.Context, b *testing.B, c nodev1.NodeServiceClient, np *nodev1.Name) {
	st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: np})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		b.Fatal(err)
	}
	answers, err := c.RespondStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			if _, err := answers.Recv(); err != nil {
				return
			}
		}
	}()
	go func() {
		batch := &nodev1.RespondBatch{}
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			batch.Answers = batch.Answers[:0]
			for _, m := range r.GetMessages() {
				if m.GetReplyTo() != "" {
					batch.Answers = append(batch.Answers, &nodev1.RespondRequest{ReplyTo: m.GetReplyTo(), Payload: m.GetPayload()})
				}
			}
			if len(batch.Answers) > 0 && answers.Send(batch) != nil {
				return
			}
		}
	}()
}
