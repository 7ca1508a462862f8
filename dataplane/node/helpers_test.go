package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(runChild(mode, os.Getenv(envConfig)))
	}
	goleak.VerifyTestMain(m)
}

// testLogger is silent unless NODE_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("NODE_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func deadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startFabric runs a control plane with topology and perGroup nodes in each group.
func startFabric(t *testing.T, topology string, perGroup int, groups ...string) *fabric.Fabric {
	t.Helper()
	return startFabricWith(t, fabric.Options{Topology: topology}, perGroup, groups...)
}

func startFabricWith(t *testing.T, o fabric.Options, perGroup int, groups ...string) *fabric.Fabric {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger()
	}
	f, err := fabric.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("fabric close: %v", err)
		}
	})
	if err := f.StartGroups(deadline(t, 30*time.Second), perGroup, groups...); err != nil {
		t.Fatal(err)
	}
	return f
}

// client is a local client of one node.
type client struct {
	t  *testing.T
	cc *grpc.ClientConn
	nodev1.NodeServiceClient
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &client{t: t, cc: cc, NodeServiceClient: nodev1.NewNodeServiceClient(cc)}
}

func clientOf(t *testing.T, f *fabric.Fabric, id string) *client {
	t.Helper()
	r := f.Node(id)
	if r == nil {
		t.Fatalf("no node %s", id)
	}
	return dial(t, r.Addr())
}

// sub is a running subscription; its messages arrive on ch.
type sub struct {
	id     uint64
	ch     chan *nodev1.Message
	cancel context.CancelFunc
	done   chan error
}

func (c *client) subscribe(name string) *sub {
	c.t.Helper()
	n, err := node.ParseName(name)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: node.NameProto(n)})
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		cancel()
		c.t.Fatalf("subscribe %s: %v", name, err)
	}
	s := &sub{id: first.GetSubscriptionId(), ch: make(chan *nodev1.Message, 100000), cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer close(s.ch)
		for {
			r, err := st.Recv()
			if err != nil {
				s.done <- err
				return
			}
			for _, m := range r.GetMessages() {
				s.ch <- m
			}
		}
	}()
	c.t.Cleanup(func() {
		cancel()
		for range s.ch {
		}
	})
	return s
}

func (c *client) publish(ctx context.Context, name, payload string, broadcast bool) (*nodev1.PublishResponse, error) {
	n, err := node.ParseName(name)
	if err != nil {
		return nil, err
	}
	return c.Publish(ctx, &nodev1.PublishRequest{Name: node.NameProto(n), Payload: []byte(payload), Broadcast: broadcast})
}

// next waits for s's next message.
func (s *sub) next(ctx context.Context) (*nodev1.Message, error) {
	select {
	case m, ok := <-s.ch:
		if !ok {
			return nil, fmt.Errorf("subscription ended: %v", <-s.done)
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// quiet reports a message s got within d, or nil.
func (s *sub) quiet(d time.Duration) *nodev1.Message {
	select {
	case m := <-s.ch:
		return m
	case <-time.After(d):
		return nil
	}
}
