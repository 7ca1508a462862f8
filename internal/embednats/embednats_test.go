package embednats_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
)

// TestMain fails the package if a test leaves a goroutine behind, with two of
// nats-server's own excepted. Once in a CI run (-race, two cores) a file store's
// state flusher, and the access-time ticker it had registered, were still running
// after every server had shut down and waited for its shutdown: a store nats-server
// did not stop (25 runs here, with and without -race and under load, did not show it
// again). A server left running, ours to stop, leaves other goroutines (listeners,
// routes, JetStream: 10 in a test that forgets Shutdown) that are still reported.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestServerKeepsDataAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") || s.Options().Port == 0 {
		t.Fatalf("ClientURL %q / port %d: want a loopback URL with the picked port", s.ClientURL(), s.Options().Port)
	}
	if !s.JetStreamReady() {
		t.Fatal("JetStream not ready after Start")
	}
	js := connect(t, s.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	opts := s.Options()
	s.Shutdown()
	s.Shutdown() // idempotent

	s2, err := embednats.Start(ctx, opts)
	if err != nil {
		t.Fatalf("restart on the same options: %v", err)
	}
	defer s2.Shutdown()
	if s2.ClientURL() != s.ClientURL() {
		t.Errorf("restarted server listens on %s, want %s", s2.ClientURL(), s.ClientURL())
	}
	js = connect(t, s2.ClientURL())
	msg, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("stream lost across restart: %v", err)
	}
	m, err := msg.GetLastMsgForSubject(ctx, "s.a")
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("message after restart = %v, %v; want \"kept\"", m, err)
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		opts embednats.Options
		want string
	}{
		"no store dir":      {embednats.Options{}, "StoreDir"},
		"bad port":          {embednats.Options{StoreDir: t.TempDir(), Port: 70000}, "port 70000"},
		"cluster no name":   {embednats.Options{StoreDir: t.TempDir(), Cluster: &embednats.ClusterOptions{}}, "Cluster.Name"},
		"cluster bad route": {embednats.Options{StoreDir: t.TempDir(), Cluster: &embednats.ClusterOptions{Name: "c", Routes: []string{"nohostport"}}}, "route"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := embednats.Start(ctx, tc.opts)
			if err == nil {
				s.Shutdown()
				t.Fatal("Start accepted bad options")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// startCluster starts a three-server cluster for the test, stopped when it ends, and
// returns it with a context that ends at the test's deadline.
func startCluster(t *testing.T) (*embednats.Cluster, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := embednats.StartCluster(ctx, embednats.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c, ctx
}

func TestClusterSurvivesOneNodeDown(t *testing.T) {
	c, ctx := startCluster(t)
	if c.Size() != 3 || strings.Count(c.ClientURL(), ",") != 2 {
		t.Fatalf("cluster of %d with URL %q, want 3 servers", c.Size(), c.ClientURL())
	}
	js := connect(t, c.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	if c.Server(0) != nil {
		t.Fatal("stopped server still listed")
	}
	// The client may have been on the stopped node: publishing retries until it has
	// failed over and the stream has a leader again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(pctx, "r3.a", []byte("x"))
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish with one of three servers down: %v", err)
		}
	}
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, 0); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadyClusterPlacesOnEveryServer creates a stream with a replica on every server
// right after the cluster says it is ready, from start and after restarting each
// server in turn: ready means the meta leader can place on every running server.
func TestReadyClusterPlacesOnEveryServer(t *testing.T) {
	c, ctx := startCluster(t)
	js := connect(t, c.ClientURL())
	for round := range c.Size() + 1 {
		name := fmt.Sprintf("R%d", round)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Replicas: c.Size()}); err != nil {
			t.Fatalf("round %d: a stream on all %d servers: %v", round, c.Size(), err)
		}
		if round == c.Size() {
			break
		}
		c.Stop(round)
		if err := c.Restart(ctx, round); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
