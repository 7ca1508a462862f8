package node_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// TestLinkFailureWarnsOncePerSeries: a link whose far end refuses is warned about
// once, however often the control plane asks for it again; the retries are debug
// lines. Once a stream opens, the next failure starts a new series and warns again.
func TestLinkFailureWarnsOncePerSeries(t *testing.T) {
	var logs syncbuf.Buffer
	n, err := node.New(node.Config{NodeID: "n1", Group: "a", Listen: "127.0.0.1:0", DialTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	defer func() { stop(); <-done }()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	warnings := func() int {
		k := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "link stream could not be opened") {
				k++
			}
		}
		return k
	}
	for range 4 { // the control plane retrying the link
		if _, err := n.Connect(ctx, "link-1", dead, nil); err == nil {
			t.Fatal("Connect to a closed port succeeded")
		}
	}
	if got := warnings(); got != 1 {
		t.Fatalf("%d warnings for four failed attempts of one link, want 1:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Errorf("the retries left no debug line:\n%s", logs.String())
	}
	// Another peer answers on a new port: the link opens, which ends the series.
	peer, err := node.New(node.Config{NodeID: "p1", Group: "b", Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	peerDone := make(chan error, 1)
	peerCtx, stopPeer := context.WithCancel(ctx)
	go func() { peerDone <- peer.Run(peerCtx) }()
	id, err := n.Connect(ctx, "link-1", peer.Addr(), nil)
	if err != nil {
		t.Fatalf("Connect to a live peer: %v", err)
	}
	_ = n.Disconnect(ctx, id)
	stopPeer()
	<-peerDone
	if _, err := n.Connect(ctx, "link-1", dead, nil); err == nil {
		t.Fatal("Connect to a closed port succeeded")
	}
	if got := warnings(); got != 2 {
		t.Errorf("%d warnings after the link opened and failed again, want 2:\n%s", got, logs.String())
	}
}
