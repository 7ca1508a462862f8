package nodestream

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSilenceLoggedOnce: a node whose requests time out is logged at warn level
// once, however many time out and however many requesters log; its first answer —
// a late one too — is logged at info level once; a later timeout starts a new
// silence, logged again.
func TestSilenceLoggedOnce(t *testing.T) {
	h := New(20 * time.Millisecond)
	p := newPeer()
	s := h.Add("g/n1", p.send)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var first time.Time
	for i := range 3 {
		start := time.Now()
		_, err := h.Request(ctx, "g/n1", listReq())
		var te *TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) || te.Node != "g/n1" || te.Waited != 20*time.Millisecond {
			t.Fatalf("request %d: %v, want a TimeoutError", i, err)
		}
		if i == 0 {
			first = te.Since
			if first.Before(start) || first.After(time.Now()) {
				t.Fatalf("the silence starts at %v, not when the request was sent", first)
			}
		}
		if !te.Since.Equal(first) {
			t.Fatalf("timeout %d says the silence started at %v, the first said %v", i, te.Since, first)
		}
		h.LogSilence(log, "g/n1")
		h.LogSilence(log, "g/n1") // a second requester finds nothing new
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "node=g/n1") {
		t.Fatalf("three timeouts logged %d warnings, want 1:\n%s", n, logs.String())
	}

	// The last request's answer comes late: nobody waits for it, and it still shows
	// the node answers.
	late := <-p.sent
	for len(p.sent) > 0 {
		late = <-p.sent
	}
	if s.Deliver(reply(late)) {
		t.Fatal("a late answer found a waiter")
	}
	h.LogSilence(log, "g/n1")
	h.LogSilence(log, "g/n1")
	if n := strings.Count(logs.String(), "level=INFO"); n != 1 || !strings.Contains(logs.String(), "answers the control plane again") {
		t.Fatalf("the answer logged %d info lines, want 1:\n%s", n, logs.String())
	}

	_, err := h.Request(ctx, "g/n1", listReq())
	var te *TimeoutError
	if !errors.As(err, &te) || !te.Since.After(first) {
		t.Fatalf("a timeout after the answer: %v, want a new silence", err)
	}
	h.LogSilence(log, "g/n1")
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 {
		t.Fatalf("a new silence logged %d warnings in all, want 2:\n%s", n, logs.String())
	}
}
