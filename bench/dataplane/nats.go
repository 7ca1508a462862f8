package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsTarget is the anchor: two core nats-servers (no JetStream) joined by a route,
// publisher on one, subscribers on the other.
type natsTarget struct {
	s1, s2   *server.Server
	pub, sub *nats.Conn
	subConns []*nats.Conn
	subs     []*nats.Subscription
}

func startServer(routes ...*url.URL) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "anchor", Host: "127.0.0.1", Port: server.RANDOM_PORT},
		Routes:  routes,
	})
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(time.Minute) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server not ready")
	}
	return s, nil
}

func startNATS(ctx context.Context) (target, error) {
	t := &natsTarget{}
	var err error
	if t.s1, err = startServer(); err != nil {
		return nil, err
	}
	route, err := url.Parse(fmt.Sprintf("nats-route://%s", t.s1.ClusterAddr()))
	if err != nil {
		t.close()
		return nil, err
	}
	if t.s2, err = startServer(route); err != nil {
		t.close()
		return nil, err
	}
	for t.s1.NumRoutes() == 0 || t.s2.NumRoutes() == 0 {
		if ctx.Err() != nil {
			t.close()
			return nil, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
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
	for _, s := range []*server.Server{t.s2, t.s1} {
		if s != nil {
			s.Shutdown()
		}
	}
}
