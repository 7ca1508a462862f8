package etcd_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

// BenchmarkSaveNode is one write — one etcd Txn — on a 1- and a 3-member cluster in
// this process: what each of a control plane's serialized writes (a registration, a
// status change) costs on etcd.
func BenchmarkSaveNode(b *testing.B) {
	for _, members := range []int{1, 3} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			c := embedetcd.New(b, embedetcd.Options{Members: members, Configure: func(c *embed.Config) { c.MaxTxnOps = 10000 }})
			s, err := cpetcd.Open(context.Background(), cpetcd.Options{Endpoints: c.Endpoints(), Prefix: "/bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if err := s.SaveNode(ctx, store.Node{ID: fmt.Sprintf("g/n%d", i%1000), Group: "g", Connected: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
