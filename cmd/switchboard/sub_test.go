package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// TestSubFailsWhenItsNodeGoes: a subscriber whose node shuts down before --count was
// reached, or that was to run until interrupted, exits non-zero with a line that says
// so, so that a script can tell "the node went away" from "done".
func TestSubFailsWhenItsNodeGoes(t *testing.T) {
	f, err := fabric.Start(context.Background(), fabric.Options{Topology: "links:\n  - group: a\n    neighbors: [b]\n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := f.StartNode(ctx, "a", "n1")
	if err != nil {
		t.Fatal(err)
	}
	type sub struct {
		args   []string
		stderr *syncbuf.Buffer
		done   chan error
	}
	var subs []sub
	for _, args := range [][]string{{"--count", "5"}, nil} {
		s := sub{args: args, stderr: &syncbuf.Buffer{}, done: make(chan error, 1)}
		cmd := exec.CommandContext(ctx, binary(t), append([]string{"sub", "--node", a.Addr(), "org/ns/svc"}, args...)...)
		cmd.Stderr = s.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		printed := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stdout)
			for first := true; sc.Scan(); first = false {
				if first {
					close(printed)
				}
			}
			s.done <- cmd.Wait()
		}()
		// Publish until the subscriber prints: then its subscription is in place.
		name := dataplane.NewName("org", "ns", "svc")
		for got := false; !got; {
			// Refused until the subscription is in place: nobody subscribes yet.
			_, _, _ = a.Publish(name, []byte("hello"), false)
			select {
			case <-printed:
				got = true
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("sub %v never printed a message; stderr:\n%s", args, s.stderr.String())
			}
		}
		subs = append(subs, s)
	}
	if err := f.StopNode(a.ID(), false); err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		var exit *exec.ExitError
		if err := <-s.done; !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("sub %v after its node stopped: %v, want a non-zero exit; stderr:\n%s", s.args, err, s.stderr.String())
		}
		if !strings.Contains(s.stderr.String(), "ended the subscription") {
			t.Errorf("sub %v: stderr does not say the node ended the subscription:\n%s", s.args, s.stderr.String())
		}
	}
}
