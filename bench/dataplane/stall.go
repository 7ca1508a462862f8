package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/status"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// stallTarget is one system set up for the stall runs: a publisher on one side, k
// subscribers of one name on the other, each on a connection of its own.
type stallTarget interface {
	name() string
	// subscribe starts len(got) subscribers; subscriber i's deliveries count in got[i].
	subscribe(ctx context.Context, got []atomic.Int64) error
	// publish sends p to every subscriber; flush pushes out anything buffered.
	publish(p []byte) error
	flush() error
	// stall makes subscriber i stop reading (it stays subscribed).
	stall(i int)
	// finish lets subscriber i read again, and reports whether its subscription was
	// ended (cut off) and how.
	finish(ctx context.Context, i int) (ended bool, how string)
	// slowConsumers is the system's count of subscribers it cut off; dropped its
	// count of copies dropped.
	slowConsumers() uint64
	dropped() uint64
	close()
}

// stallResult is a stall run: the nine (all but the stalled one) with all reading,
// then with one stalled.
type stallResult struct {
	system         string
	messages       int
	before, during float64 // the others' deliveries/s
	cutOff         bool
	how            string
	stalledGot     int64 // copies the stalled one got in the stalled phase, reading them after it
	slowConsumers  uint64
	dropped        uint64
	lost           uint64 // the others' copies that never arrived
}

// stallFinishWait is how long a resumed subscriber may take to read what its
// connection buffered and reach the end of a cut-off subscription.
const stallFinishWait = 10 * time.Second

// measureStall runs the two phases; subscriber 0 is the one that stalls.
func measureStall(ctx context.Context, t stallTarget, o options) (stallResult, error) {
	r := stallResult{system: t.name(), messages: o.stallMessages}
	k := o.stallSubscribers
	got := make([]atomic.Int64, k)
	if err := t.subscribe(ctx, got); err != nil {
		return r, err
	}
	payload := make([]byte, o.size)
	all := func(from int) int64 {
		var n int64
		for i := from; i < k; i++ {
			n += got[i].Load()
		}
		return n
	}
	// Warm up until every subscriber has a message (routes, interest propagation).
	if err := waitFor(ctx, func() bool {
		_ = t.publish(stamp(payload))
		_ = t.flush()
		time.Sleep(20 * time.Millisecond)
		for i := range got {
			if got[i].Load() == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	time.Sleep(200 * time.Millisecond)
	others := int64(k - 1)
	// phase publishes o.stallMessages broadcasts and returns the others' deliveries/s.
	// Each subscriber still reading (index reading and up) is kept within o.window
	// messages of the publisher. (A window over the others' sum let one of them fall
	// 16,000 messages behind while the rest kept up: past the node's default bound,
	// which cut off a subscriber that was reading, in 4 of 187 runs.)
	phase := func(reading int) (float64, error) {
		base := all(1)
		bases := make([]int64, k)
		for i := range got {
			bases[i] = got[i].Load()
		}
		slowest := func() int64 {
			least := got[reading].Load() - bases[reading]
			for i := reading + 1; i < k; i++ {
				least = min(least, got[i].Load()-bases[i])
			}
			return least
		}
		want := int64(o.stallMessages) * others
		start := time.Now()
		for sent := 0; sent < o.stallMessages; {
			if err := waitWindow(ctx, func() bool {
				return int64(sent)-slowest() < int64(o.window)
			}); err != nil {
				return 0, err
			}
			if err := t.publish(stamp(payload)); err != nil {
				return 0, err
			}
			sent++
			if sent%16 == 0 {
				if err := t.flush(); err != nil {
					return 0, err
				}
			}
		}
		if err := t.flush(); err != nil {
			return 0, err
		}
		_ = waitFor(ctx, func() bool { return all(1)-base >= want }, 10*time.Second)
		n := all(1) - base
		if n < want {
			r.lost += uint64(want - n)
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	var err error
	// All reading; the one to stall must have caught up before it stalls.
	stalledBase := got[0].Load()
	if r.before, err = phase(0); err != nil {
		return r, err
	}
	_ = waitFor(ctx, func() bool { return got[0].Load()-stalledBase >= int64(o.stallMessages) }, 10*time.Second)
	if n := got[0].Load() - stalledBase; n < int64(o.stallMessages) {
		r.lost += uint64(int64(o.stallMessages) - n)
	}
	time.Sleep(200 * time.Millisecond)
	// One stalled.
	t.stall(0)
	stalledBase = got[0].Load()
	if r.during, err = phase(1); err != nil {
		return r, err
	}
	r.cutOff, r.how = t.finish(ctx, 0)
	r.stalledGot = got[0].Load() - stalledBase
	r.slowConsumers, r.dropped = t.slowConsumers(), t.dropped()
	return r, nil
}

// gate holds a reader back while closed.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // non-nil while stalled
}

func (g *gate) stall() {
	g.mu.Lock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

// wait returns once the gate is open or done is closed.
func (g *gate) wait(done <-chan struct{}) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-done:
		}
	}
}

// gatedConn is a client's connection whose reads a gate holds back: a NATS client
// that stops reading its socket, as a stalled process does.
type gatedConn struct {
	net.Conn
	g    *gate
	once sync.Once
	done chan struct{}
}

func (c *gatedConn) Read(b []byte) (int, error) {
	c.g.wait(c.done)
	return c.Conn.Read(b)
}

func (c *gatedConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// gatedDialer dials connections that g holds back (nats.CustomDialer).
type gatedDialer struct{ g *gate }

func (d gatedDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: d.g, done: make(chan struct{})}, nil
}

// natsStall: two routed servers, publisher on server 1, the subscribers (nats.go
// clients, each a connection of its own, no reconnect) on server 2. A stalled
// subscriber's socket is not read at all, so server 2 sees a slow consumer.
type natsStall struct {
	servers []*server.Server
	s2      *server.Server
	pub     *nats.Conn
	conns   []*nats.Conn
	subs    []*nats.Subscription
	gates   []*gate
	closed  []chan struct{}
}

func startNATSStall(ctx context.Context, _ options) (stallTarget, error) {
	s1, s2, err := startRoutedPair(ctx)
	if err != nil {
		return nil, err
	}
	t := &natsStall{servers: []*server.Server{s1, s2}, s2: s2}
	if t.pub, err = nats.Connect(s1.ClientURL()); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *natsStall) name() string { return "NATS core (2 servers, route)" }

func (t *natsStall) subscribe(_ context.Context, got []atomic.Int64) error {
	for i := range got {
		g := &gate{}
		closed := make(chan struct{})
		nc, err := nats.Connect(t.s2.ClientURL(), nats.SetCustomDialer(gatedDialer{g}), nats.NoReconnect(),
			nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		if err != nil {
			return err
		}
		t.conns, t.gates, t.closed = append(t.conns, nc), append(t.gates, g), append(t.closed, closed)
		s, err := nc.Subscribe("bench.stall", func(*nats.Msg) { got[i].Add(1) })
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

func (t *natsStall) publish(p []byte) error { return t.pub.Publish("bench.stall", p) }

// flush is a no-op: the NATS client flushes its buffer by itself as soon as it can.
func (t *natsStall) flush() error { return nil }

func (t *natsStall) stall(i int) { t.gates[i].stall() }

func (t *natsStall) finish(ctx context.Context, i int) (bool, string) {
	t.gates[i].resume()
	select {
	case <-t.closed[i]:
		how := "connection closed"
		if err := t.conns[i].LastError(); err != nil {
			how += ": " + err.Error()
		}
		return true, how
	case <-time.After(stallFinishWait):
		return false, "still connected"
	case <-ctx.Done():
		return false, ctx.Err().Error()
	}
}

func (t *natsStall) slowConsumers() uint64 { return t.s2.NumSlowConsumersClients() }

// dropped counts what the clients dropped (their pending limits); the server counts
// no copies, only slow consumers.
func (t *natsStall) dropped() uint64 {
	var n uint64
	for _, s := range t.subs {
		if d, err := s.Dropped(); err == nil {
			n += uint64(d)
		}
	}
	return n
}

func (t *natsStall) close() {
	for _, g := range t.gates {
		g.resume()
	}
	for _, nc := range append(t.conns, t.pub) {
		if nc != nil {
			nc.Close()
		}
	}
	shutdown(t.servers)
}

// nodeStall: groups a and b linked, publisher (broadcasts) at a/n1, the subscribers
// at b/n1, each a Subscribe stream on a client connection of its own. A stalled
// subscriber stops calling Recv (gRPC goes on filling its stream's window).
type nodeStall struct {
	*nodeTarget
	subject *nodev1.Name
	conns   []clientConn
	gates   []*gate
	ends    []chan struct{}
	errs    []error
	sctx    context.Context
	stop    context.CancelFunc
	swg     sync.WaitGroup
}

func startNodeStall(ctx context.Context, _ options) (stallTarget, error) {
	nf, err := startFabric(ctx, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	if err != nil {
		return nil, err
	}
	nt, err := newNodeTarget("switchboard node (2 groups, link)", nf, "a/n1", "b/n1")
	if err != nil {
		return nil, err
	}
	t := &nodeStall{nodeTarget: nt.(*nodeTarget), subject: mustName("bench/dp/stall")}
	t.sctx, t.stop = context.WithCancel(context.Background())
	return t, nil
}

func (t *nodeStall) subscribe(_ context.Context, got []atomic.Int64) error {
	addr := t.nf.f.Node("b/n1").Addr()
	t.errs = make([]error, len(got))
	for i := range got {
		cc, err := dial(addr)
		if err != nil {
			return err
		}
		t.conns = append(t.conns, cc)
		st, err := nodev1.NewNodeServiceClient(cc).Subscribe(t.sctx, &nodev1.SubscribeRequest{Name: t.subject})
		if err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
		g, end := &gate{}, make(chan struct{})
		t.gates, t.ends = append(t.gates, g), append(t.ends, end)
		t.swg.Go(func() {
			defer close(end)
			for {
				g.wait(t.sctx.Done())
				r, err := st.Recv()
				if err != nil {
					t.errs[i] = err
					return
				}
				got[i].Add(int64(len(r.GetMessages())))
			}
		})
	}
	return nil
}

func (t *nodeStall) publish(p []byte) error { return t.publishTo(t.subject, p, true) }

func (t *nodeStall) stall(i int) { t.gates[i].stall() }

func (t *nodeStall) finish(ctx context.Context, i int) (bool, string) {
	t.gates[i].resume()
	select {
	case <-t.ends[i]:
		err := t.errs[i]
		if errors.Is(err, io.EOF) {
			return true, "stream ended (EOF)"
		}
		s, _ := status.FromError(err)
		return true, fmt.Sprintf("stream ended: %s", s.Code())
	case <-time.After(stallFinishWait):
		return false, "stream still open"
	case <-ctx.Done():
		return false, ctx.Err().Error()
	}
}

func (t *nodeStall) slowConsumers() uint64 {
	return t.nf.counter("switchboard_node_slow_consumers_total", nil)
}

func (t *nodeStall) close() {
	t.stop()
	for _, g := range t.gates {
		g.resume()
	}
	t.swg.Wait()
	for _, cc := range t.conns {
		_ = cc.Close()
	}
	t.nodeTarget.close()
}
