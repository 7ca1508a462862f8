package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// snapshotOf is n endpoints over 100 services, by key, as a stream stages them.
func snapshotOf(n int) map[endpoint.Key]endpoint.Endpoint {
	snap := make(map[endpoint.Key]endpoint.Endpoint, n)
	for i := range n {
		e := endpoint.Endpoint{Cluster: "prod", Service: fmt.Sprintf("svc-%03d", i%100), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Priority: 1}
		snap[e.Key()] = e
	}
	return snap
}

// BenchmarkReplaceSnapshot100k applies a full snapshot of 100,000 endpoints: into an
// empty cache (the client's start, until WaitReady), and again over the same state
// (a reconnect whose snapshot changed nothing).
func BenchmarkReplaceSnapshot100k(b *testing.B) {
	snap := snapshotOf(100000)
	v := token.Version{Epoch: 1, Seq: 1}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := newCache(time.Now)
			c.replace(snap, v, v, 0)
		}
	})
	b.Run("again", func(b *testing.B) {
		c := newCache(time.Now)
		c.replace(snap, v, v, 0)
		b.ReportAllocs()
		for b.Loop() {
			c.replace(snap, v, v, 0)
		}
	})
}
