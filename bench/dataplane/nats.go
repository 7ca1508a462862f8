package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
)

// natsTarget is the anchor: two nats-servers joined by a route, publisher on one,
// subscribers on the other.
type natsTarget struct {
	dir      string
	s1, s2   *embednats.Server
	pub, sub *nats.Conn
	subConns []*nats.Conn
	subs     []*nats.Subscription
}

func startNATS(ctx context.Context) (target, error) {
	dir, err := os.MkdirTemp("", "bench-dataplane-nats-")
	if err != nil {
		return nil, err
	}
	t := &natsTarget{dir: dir}
	t.s1, err = embednats.Start(ctx, embednats.Options{Name: "anchor-1", StoreDir: dir + "/1", StartTimeout: time.Minute,
		Cluster: &embednats.ClusterOptions{Name: "anchor"}})
	if err != nil {
		t.close()
		return nil, err
	}
	t.s2, err = embednats.Start(ctx, embednats.Options{Name: "anchor-2", StoreDir: dir + "/2", StartTimeout: time.Minute,
		Cluster: &embednats.ClusterOptions{Name: "anchor", Routes: []string{t.s1.ClusterURL()}}})
	if err != nil {
		t.close()
		return nil, err
	}
	if t.pub, err = nats.Connect(t.s1.ClientURL()); err != nil {
		t.close()
		return nil, err
	}
	if t.sub, err = nats.Connect(t.s2.ClientURL()); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *natsTarget) name() string { return "NATS core (2 servers, route)" }

func (t *natsTarget) subscribe(_ context.Context, k int, got func([]byte)) error {
	subject := "bench.one"
	if k > 1 {
		subject = "bench.fan"
	}
	for range k {
		// Each fan-out subscriber has a connection of its own, as separate clients do.
		nc := t.sub
		if k > 1 {
			var err error
			if nc, err = nats.Connect(t.s2.ClientURL()); err != nil {
				return err
			}
			t.subConns = append(t.subConns, nc)
		}
		s, err := nc.Subscribe(subject, func(m *nats.Msg) { got(m.Data) })
		if err != nil {
			return err
		}
		_ = s.SetPendingLimits(-1, -1)
		t.subs = append(t.subs, s)
		if err := nc.Flush(); err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
	}
	return nil
}

func (t *natsTarget) publish(p []byte, fan bool) error {
	if fan {
		return t.pub.Publish("bench.fan", p)
	}
	return t.pub.Publish("bench.one", p)
}

// flush is a no-op: the NATS client flushes its buffer by itself as soon as it can.
func (t *natsTarget) flush() error { return nil }

func (t *natsTarget) dropped() uint64 {
	var n uint64
	for _, s := range t.subs {
		if d, err := s.Dropped(); err == nil {
			n += uint64(d)
		}
	}
	return n
}

func (t *natsTarget) close() {
	for _, nc := range append(t.subConns, t.pub, t.sub) {
		if nc != nil {
			nc.Close()
		}
	}
	for _, s := range []*embednats.Server{t.s2, t.s1} {
		if s != nil {
			s.Shutdown()
		}
	}
	_ = os.RemoveAll(t.dir)
}
