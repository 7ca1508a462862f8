package southbound

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// TestReplacedStreamIsToldWithAborted: when a second stream registers a node id that
// already has one, the first stream is ended with Aborted, so the process on it stops
// believing it is registered; the newer stream keeps the node.
func TestReplacedStreamIsToldWithAborted(t *testing.T) {
	f := newFixture(t, nil, 0)
	old := f.register("cloud", "n1", "")
	f.register("cloud", "n1", "")
	errc := make(chan error, 1)
	go func() { errc <- old.recvErr() }()
	select {
	case err := <-errc:
		wantStatus(t, err, codes.Aborted, "replaced by a newer connection")
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced stream is still open: the process on it still believes it is registered")
	}
	nd, err := f.st.GetNode(context.Background(), "cloud/n1")
	if err != nil || !nd.Connected || nd.Session != 2 || !f.streams.Connected("cloud/n1") {
		t.Fatalf("node after its old stream was closed: %+v, %v, stream %v", nd, err, f.streams.Connected("cloud/n1"))
	}
	if len(f.logs.lines("level=WARN", "cloud/n1", "replaced")) == 0 {
		t.Fatal("the replacement was not logged at warn level")
	}
}

// TestReplacedWhileAnsweredIsToldWithAborted: the newer stream registers while the
// older one's registration answer is still being sent; the older RPC still ends
// with Aborted, not with the failed send's error (which reached the node as
// UNKNOWN, and was a CI flake of the test above when the node re-registered at once).
func TestReplacedWhileAnsweredIsToldWithAborted(t *testing.T) {
	f := newFixture(t, nil, 0)
	var first atomic.Bool
	newer := make(chan struct{})
	f.mu.Lock()
	f.beforeSend = func(m *controllerv1.ControlMessage) {
		if m.GetRegisterNodeResponse() != nil && first.CompareAndSwap(false, true) {
			defer close(newer)
			f.register("cloud", "n1", "") // the newer stream, registered before the old one's answer goes out
		}
	}
	f.mu.Unlock()
	old := f.open()
	old.send(registerMsg("cloud", "n1", ""))
	errc := make(chan error, 1)
	go func() { errc <- old.recvErr() }() // the answer may or may not come first
	select {
	case err := <-errc:
		wantStatus(t, err, codes.Aborted, "replaced by a newer connection")
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced stream is still open")
	}
	select {
	case <-newer:
	case <-time.After(10 * time.Second):
		t.Fatal("the newer stream's registration did not complete")
	}
	if !f.streams.Connected("cloud/n1") {
		t.Fatal("the newer stream does not hold the node")
	}
}

// TestSameNodeIDTwiceIsLoud: two data-plane processes configured with the same node id
// keep displacing each other (each reconnects with backoff). Neither may believe it is
// registered while the other holds the id, and both sides say so at warn level.
func TestSameNodeIDTwiceIsLoud(t *testing.T) {
	f := newFixture(t, nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type proc struct {
		c    *dataplane.Controller
		logs *logBuffer
		done chan error
	}
	start := func(name string) proc {
		p := proc{logs: &logBuffer{}, done: make(chan error, 1)}
		c, err := dataplane.New(dataplane.Config{
			NodeID: "n1", Group: "cloud", Conn: f.conn, Datapath: memdp.New(), Logger: p.logs.logger(),
			Details: []dataplane.ConnectionDetails{{Endpoint: name + ":46357", ExternalEndpoint: "ext-" + name + ":443"}},
			Backoff: dataplane.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, HealthyAfter: time.Minute},
		})
		if err != nil {
			t.Fatal(err)
		}
		p.c = c
		go func() { p.done <- c.Run(ctx) }()
		return p
	}
	a := start("a")
	if err := a.c.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	b := start("b")
	defer func() {
		cancel()
		for _, p := range []proc{a, b} {
			<-p.done
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		told := len(a.logs.lines("level=WARN", "Aborted", "replaced by a newer connection")) > 0
		if told && a.c.Stats().Registrations >= 2 && b.c.Stats().Registrations >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first process never told it was replaced (told %v); registrations a=%d b=%d; its log:\n%s",
				told, a.c.Stats().Registrations, b.c.Stats().Registrations, fmt.Sprint(a.logs.lines()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(f.logs.lines("level=WARN", "cloud/n1", "replaced")) == 0 {
		t.Fatal("the control plane did not warn about the node id registered twice")
	}
}
