package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// TestReqAnsweredBySubReply: `req` gets the answer of a `sub --reply` on another
// group's node, across the link; a request nobody subscribes to fails at once, and
// one above the message limit is refused naming it. The same on the framed transport
// (--framed).
func TestReqAnsweredBySubReply(t *testing.T) {
	t.Run("grpc", func(t *testing.T) { testReqAnsweredBySubReply(t) })
	t.Run("framed", func(t *testing.T) { testReqAnsweredBySubReply(t, "--framed") })
}

// withFlags puts flags after the command's name, args[0].
func withFlags(flags []string, args ...string) []string {
	return append(append([]string{args[0]}, flags...), args[1:]...)
}

func testReqAnsweredBySubReply(t *testing.T, transport ...string) {
	f, err := fabric.Start(context.Background(), fabric.Options{Topology: "links:\n  - group: a\n    neighbors: [b]\n",
		Node: func(c *node.Config) { c.MaxMessageBytes = 100 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.StartGroups(ctx, 1, "a", "b"); err != nil {
		t.Fatal(err)
	}
	requester, responder := f.Node("a/n1").Addr(), f.Node("b/n1").Addr()
	subDone := make(chan string, 1)
	go func() {
		out, errOut, _ := run(t, withFlags(transport, "sub", "--node", responder, "--count", "1", "--reply", "pong", "org/ns/echo")...)
		subDone <- out + errOut
	}()
	for {
		out, errOut, code := run(t, withFlags(transport, "req", "--node", requester, "--timeout", "1s", "org/ns/echo", "ping")...)
		if code == 0 {
			if out != "pong\n" {
				t.Fatalf("req printed %q, want pong", out)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("req never answered: exit %d, %s", code, errOut)
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case out := <-subDone:
		if !strings.Contains(out, "from a/n1: ping") {
			t.Errorf("sub --reply printed %q, want the request", out)
		}
	case <-ctx.Done():
		t.Fatal("sub --count 1 did not exit after the request")
	}
	// A timeout of a minute, longer than run's own deadline: only an answer at once
	// passes.
	_, errOut, code := run(t, withFlags(transport, "req", "--node", requester, "--timeout", "1m", "org/ns/nobody", "ping")...)
	if code != 1 || !strings.Contains(errOut, "no responders for org/ns/nobody") {
		t.Errorf("req to nobody: exit %d, %q; want 1 naming no responders", code, errOut)
	}
	_, errOut, code = run(t, withFlags(transport, "req", "--node", requester, "org/ns/echo", strings.Repeat("x", 101))...)
	if code != 2 || !strings.Contains(errOut, "the limit is 100 bytes") {
		t.Errorf("oversized req: exit %d, %q; want 2 naming the limit", code, errOut)
	}
}

// TestNodeSlowConsumerFlags: the node command's subscriber limits flags are checked
// as usage errors.
func TestNodeSlowConsumerFlags(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte("node_id: n1\ngroup: b\nlisten: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--config", cfg, "--slow-consumer", "block"}, `--slow-consumer: slow consumer policy "block"`},
		{[]string{"node", "--config", cfg, "--subscriber-queue-len", "-1"}, "--subscriber-queue-len -1"},
		{[]string{"node", "--config", cfg, "--link-transport", "quic"}, `--link-transport "quic": want framed or grpc`},
	} {
		_, errOut, code := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("switchboard %s: exit %d, stderr %q; want 2 naming %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	file, err := loadNodeConfig(nodeOptions{config: cfg, subQueueLen: 100, slowConsumer: "drop", linkTransport: "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	if file.Limits.SubscriberQueueLen != 100 || file.Limits.SlowConsumer != "drop" || file.LinkTransport != "grpc" {
		t.Errorf("limits and link transport after the flags: %+v, %q", file.Limits, file.LinkTransport)
	}
	built, res, err := file.Build(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Close()
	if built.LinkTransport != "grpc" {
		t.Errorf("built link transport %q, want grpc", built.LinkTransport)
	}
}
