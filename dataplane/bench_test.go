package dataplane_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// BenchmarkControllers1000 measures the DP side of the 1,000-node benchmark: 1,000
// controllers over one loopback channel register with the scripted CP, then each
// applies one command (one link, one subscription) and acks. Run with -benchtime=1x.
func BenchmarkControllers1000(b *testing.B) {
	const nodes = 1000
	for b.Loop() {
		register, apply := runControllers(b, nodes)
		b.ReportMetric(float64(register.Milliseconds()), "register-ms")
		b.ReportMetric(float64(apply.Milliseconds()), "apply-ms")
	}
}

func runControllers(b *testing.B, nodes int) (register, apply time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	peer := startPeer(b)
	cc, err := grpc.NewClient(peer.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	start := time.Now()
	for i := range nodes {
		dp := memdp.New()
		c, err := dataplane.New(dataplane.Config{
			NodeID: fmt.Sprintf("n%d", i), Group: fmt.Sprintf("g%d", i%100), Conn: cc, Datapath: dp,
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { c.Run(runCtx); dp.Close() })
	}
	streams := make([]*peerStream, 0, nodes)
	for range nodes {
		select {
		case s := <-peer.streams:
			streams = append(streams, s)
		case <-ctx.Done():
			b.Fatalf("only %d of %d registered", len(streams), nodes)
		}
	}
	register = time.Since(start)
	start = time.Now()
	var acks sync.WaitGroup
	for i, s := range streams {
		acks.Go(func() {
			link := fmt.Sprintf("L%d", i)
			ack := s.command(ctx, &controllerv1.ConfigCommand{
				ConnectionsToCreate: []*controllerv1.Connection{conn(link, "10.1.0.1:1")},
				SubscriptionsToSet:  []*controllerv1.Subscription{sub(link, "org", "ns", "svc")},
			})
			if !ack.GetSubscriptionsStatus()[0].GetSuccess() {
				b.Error("subscription failed")
			}
		})
	}
	acks.Wait()
	return register, time.Since(start)
}
