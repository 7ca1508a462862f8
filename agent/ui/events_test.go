package ui_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/ui"
)

// stream is an open /ui/events response, read line by line.
type stream struct {
	resp  *http.Response
	lines chan string
}

func openStream(t *testing.T, ctx context.Context, url string) (*stream, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp
	}
	s := &stream{resp: resp, lines: make(chan string, 100)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				s.lines <- sc.Text()
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s, resp
}

// next returns the next non-empty line, failing after d.
func (s *stream) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatal("the stream ended")
		}
		return l
	case <-time.After(d):
		t.Fatalf("no line within %s", d)
		return ""
	}
}

// quiet reports whether no line comes within d.
func (s *stream) quiet(d time.Duration) bool {
	select {
	case <-s.lines:
		return false
	case <-time.After(d):
		return true
	}
}

// TestEventsOnePerChange: the stream says the current version when it opens, then
// sends one message per change, a burst of changes coalesced into one carrying the
// latest version; nothing is sent while nothing changes.
func TestEventsOnePerChange(t *testing.T) {
	src := &fake{s: sample()}
	base := serve(t, ui.Options{Source: src})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, resp := openStream(t, ctx, base+"/ui/events?entry=web")
	if s == nil {
		t.Fatalf("GET /ui/events = %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if l := s.next(t, wait); l != "data: 0" {
		t.Fatalf("first message %q, want data: 0", l)
	}
	if !s.quiet(300 * time.Millisecond) {
		t.Fatal("a message came without a change")
	}
	src.set(sample())
	if l := s.next(t, wait); l != "data: 1" {
		t.Fatalf("after a change: %q, want data: 1", l)
	}
	for range 5 {
		src.set(sample())
	}
	if l := s.next(t, wait); l != "data: 6" {
		t.Fatalf("after a burst of five changes: %q, want one message, data: 6", l)
	}
	if !s.quiet(400 * time.Millisecond) {
		t.Fatal("a burst of changes sent more than one message")
	}
}

// TestEventsHeartbeatAndDone: an idle stream sends a comment every heartbeat, and
// ends when the page's Done closes (the agent stopping).
func TestEventsHeartbeatAndDone(t *testing.T) {
	done := make(chan struct{})
	base := serve(t, ui.Options{Source: &fake{s: sample()}, Heartbeat: 50 * time.Millisecond, Done: done})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, resp := openStream(t, ctx, base+"/ui/events")
	if s == nil {
		t.Fatalf("GET /ui/events = %d", resp.StatusCode)
	}
	s.next(t, wait)
	if l := s.next(t, wait); !strings.HasPrefix(l, ":") {
		t.Fatalf("idle stream sent %q, want a comment", l)
	}
	close(done)
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-s.lines:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end when Done closed")
		}
	}
}

// TestEventsBounded: past MaxClients open streams, one more is answered 503 (its
// page polls instead); when a stream closes, its slot is free again.
func TestEventsBounded(t *testing.T) {
	base := serve(t, ui.Options{Source: &fake{s: sample()}, MaxClients: 2})
	var cancels []context.CancelFunc
	var open []*stream
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		s, resp := openStream(t, ctx, base+"/ui/events")
		if s == nil {
			t.Fatalf("stream %d: %d", len(open), resp.StatusCode)
		}
		s.next(t, wait) // served: it holds its slot
		cancels, open = append(cancels, cancel), append(open, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if s, resp := openStream(t, ctx, base+"/ui/events"); s != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third stream with MaxClients 2: %d, want 503", resp.StatusCode)
	}
	cancels[0]()
	deadline := time.Now().Add(wait)
	for {
		s, resp := openStream(t, ctx, base+"/ui/events")
		if s != nil {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after one stream closed: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChanges: Version's channel closes at the next Bump, and only then; a nil
// *Changes ignores Bump.
func TestChanges(t *testing.T) {
	var c ui.Changes
	v, next := c.Version()
	if v != 0 {
		t.Fatalf("version %d", v)
	}
	select {
	case <-next:
		t.Fatal("closed before any change")
	default:
	}
	c.Bump()
	select {
	case <-next:
	default:
		t.Fatal("not closed by Bump")
	}
	if v, _ := c.Version(); v != 1 {
		t.Fatalf("version after a bump: %d", v)
	}
	var nilChanges *ui.Changes
	nilChanges.Bump()
}
