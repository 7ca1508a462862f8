package client_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

// A scoped client keeps every promise of the registry contract.
func TestConformanceScoped(t *testing.T) {
	registrytest.Run(t, func() (registry.Registry, error) {
		b := memory.New()
		srv, stop := runServer(t, registrar.Config{Cluster: "prod", AlsoAccept: []string{"*"}, Backend: b, BatchInterval: 10 * time.Millisecond})
		c, err := client.New(client.Options{Addresses: []string{srv.Addr().String()}, Scoped: true})
		if err != nil {
			return nil, err
		}
		return served{Client: c, stop: func() { stop(); b.Close() }}, nil
	}, registrytest.Options{})
}

// A scoped client holds the services its watches name and the ones it writes,
// reads others from the registrar, and lets a service go when its last watch ends.
func TestScopedClientHoldsWhatItsUsersNeed(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b, BatchInterval: 10 * time.Millisecond, ProgressInterval: 20 * time.Millisecond})
	fleet := newClient(t, client.Options{Addresses: []string{srv.Addr().String()}})
	var ops []registry.Op
	for i := range 10 {
		for _, svc := range []string{"web", "db", "cache"} {
			ops = append(ops, registry.Op{Kind: registry.OpRegister, Endpoint: ep("east", svc, "10.0.0."+itoa(i+1), 8000)})
		}
	}
	apply(t, fleet, ops...)

	c := newClient(t, client.Options{Addresses: []string{srv.Addr().String()}, Scoped: true})
	ctx := testCtx(t)
	web, err := c.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got := initial(t, web); got != 10 {
		t.Fatalf("watch of web: %d endpoints before Synced, want 10", got)
	}
	if n := client.Held(c); n != 10 {
		t.Fatalf("scoped client holds %d endpoints, want web's 10", n)
	}
	if got := list(t, c, endpoint.Filter{Service: "db"}); len(got) != 10 {
		t.Fatalf("List of db (not watched) = %d endpoints, want 10 read from the registrar", len(got))
	}

	// Its own write widens the set to the written service.
	apply(t, c, registry.Op{Kind: registry.OpRegister, Endpoint: ep("east", "api", "10.0.1.1", 9000)})
	eventually(t, 20*time.Second, "the written service joins the set", func() bool { return client.Held(c) == 11 })

	// A second watch adds db; changes to cache reach nobody and are not held.
	wctx, stopDB := contextWithCancel(t)
	db, err := c.Watch(wctx, endpoint.Filter{Service: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if got := initial(t, db); got != 10 {
		t.Fatalf("watch of db: %d endpoints before Synced, want 10", got)
	}
	apply(t, fleet, registry.Op{Kind: registry.OpRegister, Endpoint: ep("east", "cache", "10.0.9.9", 8000)},
		registry.Op{Kind: registry.OpRegister, Endpoint: ep("east", "web", "10.0.9.9", 8000)})
	if ev := next(t, web); ev.Type != registry.Added || ev.Endpoint.Address != "10.0.9.9" {
		t.Fatalf("web watch got %v, want Added 10.0.9.9", ev)
	}
	if n := client.Held(c); n != 22 {
		t.Fatalf("scoped client holds %d endpoints, want web's 11, db's 10 and its own 1", n)
	}

	// The own write is confirmed although the changes after it were of other services.
	eventually(t, 20*time.Second, "own write confirmed", func() bool { return client.Unconfirmed(c) == 0 })

	stopDB()
	eventually(t, 20*time.Second, "db leaves the set with its last watch", func() bool { return client.Held(c) == 12 })
	select {
	case ev := <-web:
		t.Fatalf("web watch saw %v when db left the set", ev)
	case <-time.After(100 * time.Millisecond):
	}

	// A watch of every service widens the set to the fleet.
	all, err := c.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := initial(t, all); got != 33 {
		t.Fatalf("watch of everything: %d endpoints before Synced, want 33", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(testCtx(t))
	t.Cleanup(cancel)
	return ctx, cancel
}

// initial counts a watch's Added events up to Synced.
func initial(t *testing.T, ch <-chan registry.Event) int {
	t.Helper()
	n := 0
	for {
		ev := next(t, ch)
		if ev.Type == registry.Synced {
			return n
		}
		if ev.Type != registry.Added {
			t.Fatalf("initial state has %v", ev)
		}
		n++
	}
}

func next(t *testing.T, ch <-chan registry.Event) registry.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
	}
	return registry.Event{}
}

// A scoped watch the server refuses at once is reported with the server's status.
// The client's first Send on such a stream finds it ended and gets io.EOF, which
// says nothing; the status is what the stream's Recv returns.
func TestScopedWatchReportsTheRefusal(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer() // no services: every call is Unimplemented
	go func() { _ = bare.Serve(lis) }()
	t.Cleanup(bare.Stop)
	log := &syncbuf.Buffer{}
	newClient(t, client.Options{Addresses: []string{lis.Addr().String()}, Scoped: true,
		BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	const tries = 200
	lost := func() []string {
		var out []string
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "registrar watch stream lost") {
				out = append(out, l)
			}
		}
		return out
	}
	eventually(t, 30*time.Second, strconv.Itoa(tries)+" refused watches", func() bool { return len(lost()) >= tries })
	for _, l := range lost()[:tries] {
		if !strings.Contains(l, "unimplemented") {
			t.Fatalf("a refused watch was logged as %q, want the server's status (unimplemented)", l)
		}
	}
}
