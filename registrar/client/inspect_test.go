package client_test

import (
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// TestConnectionFollowsTheStream: Connection says connected, since when and at
// which version once the stream has caught up; when the registrar goes away it says
// disconnected, since when, and why the stream ended.
func TestConnectionFollowsTheStream(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() }) // after the registrar stops: cleanups run last first
	apply(t, b, registry.Register(ep("east", "web", "10.0.0.1", 80)))
	reg := runRegistrar(t, registrar.Config{Cluster: "east", Backend: b})
	h := host(t, reg, "127.0.0.1:0")
	start := time.Now()
	c := newClient(t, client.Options{Addresses: []string{h.addr}, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	waitReady(t, c)

	var conn client.Connection
	eventually(t, 10*time.Second, "connected", func() bool { conn = c.Connection(); return conn.Connected })
	if conn.Target != h.addr || conn.Version == "" || conn.Since.Before(start) || conn.LastError != "" {
		t.Fatalf("connected: %+v", conn)
	}
	if conn.Version != client.Token(c) {
		t.Errorf("version %q, want the cache's token %q", conn.Version, client.Token(c))
	}

	// The stream may end while stop is under way: the cut begins when stop is called.
	cut := time.Now()
	h.stop()
	eventually(t, 10*time.Second, "disconnected with a reason", func() bool {
		conn = c.Connection()
		return !conn.Connected && conn.LastError != ""
	})
	if conn.Since.Before(cut) || conn.LastErrorAt.Before(cut) || conn.Channel == "READY" {
		t.Fatalf("after the cut: %+v", conn)
	}
}

// TestConnectionOnTheDriver: a registrar backend opened by name is a Front whose
// driver reports the connection, as the agent finds it.
func TestConnectionOnTheDriver(t *testing.T) {
	r, err := registry.Open(testCtx(t), "registrar", map[string]string{client.ParamAddress: "127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, ok := r.Driver().(interface{ Connection() client.Connection })
	if !ok {
		t.Fatalf("the driver %T has no Connection", r.Driver())
	}
	if conn := d.Connection(); conn.Target != "127.0.0.1:1" || conn.Connected {
		t.Fatalf("connection to nothing: %+v", conn)
	}
}

// TestConnectionSinceSurvivesAScopeChange: a scoped client whose set of services
// changes gets a new snapshot on the same stream; it stays connected since the
// stream came up, not since that snapshot.
func TestConnectionSinceSurvivesAScopeChange(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	apply(t, b, registry.Register(ep("east", "web", "10.0.0.1", 80)), registry.Register(ep("east", "db", "10.0.0.2", 5432)))
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: b, BatchInterval: 10 * time.Millisecond, ProgressInterval: 20 * time.Millisecond})
	c := newClient(t, client.Options{Addresses: []string{srv.Addr().String()}, Scoped: true})
	ctx := testCtx(t)
	web, err := c.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	initial(t, web)
	var conn client.Connection
	eventually(t, 10*time.Second, "connected", func() bool { conn = c.Connection(); return conn.Connected })
	since := conn.Since

	time.Sleep(50 * time.Millisecond) // a "since" reset by the next snapshot would move
	db, err := c.Watch(ctx, endpoint.Filter{Service: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if n := initial(t, db); n != 1 {
		t.Fatalf("watch of db: %d endpoints, want 1", n)
	}
	eventually(t, 10*time.Second, "the client holds web and db", func() bool { return client.Held(c) == 2 })
	conn = c.Connection()
	if !conn.Connected || conn.LastError != "" || gauge(t, c, "agent_registrar_stream_reconnects_total") != 0 {
		t.Fatalf("the stream dropped: %+v", conn)
	}
	if !conn.Since.Equal(since) {
		t.Fatalf("connected since %s, then since %s after the scope changed on the same stream", since.Format(time.StampMicro), conn.Since.Format(time.StampMicro))
	}
}
