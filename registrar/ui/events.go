package ui

import (
	"fmt"
	"net/http"
	"time"
)

// The event stream (/ui/events) tells an open page that what it shows changed:
// one message per change of the mirror, the first at once, the changes of the
// next eventGap after it in one message. Its data is the mirror's generation,
// which the page does not read: live.js fetches the fragment anew. Every
// message makes a rendering (shared by the viewers of one filter), and a busy
// registrar's changes come while it fans them out: at most two a second, a
// rendering of about 2 ms each at 100,000 endpoints, keep the page out of the
// fan-out's way, and a change still shows within a second.
const (
	eventGap  = 500 * time.Millisecond
	heartbeat = 15 * time.Second
	// writeTimeout ends the stream of a viewer that stopped reading.
	writeTimeout = 10 * time.Second
)

func (p *Page) serveEvents(w http.ResponseWriter, r *http.Request) {
	if _, err := parseFilter(r); err != nil {
		refuse(w, err)
		return
	}
	select {
	case p.viewers <- struct{}{}:
		defer func() { <-p.viewers }()
	default:
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many open event streams; the page polls instead", http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(msg string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprint(w, msg); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// One message at once: a change between the page's rendering and this
	// stream's start would otherwise wait for the next.
	gen, changed := p.m.watch()
	if !send(fmt.Sprintf("retry: 2000\ndata: %d\n\n", gen)) {
		return
	}
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-p.done:
			return
		case <-beat.C:
			if !send(": heartbeat\n\n") {
				return
			}
			continue
		case <-changed:
		}
		gen, changed = p.m.watch()
		if !send(fmt.Sprintf("data: %d\n\n", gen)) {
			return
		}
		// The changes of the next eventGap close changed meanwhile, and make
		// one message after it.
		if !p.pause(r, eventGap) {
			return
		}
	}
}

// pause waits d, and reports false if the viewer left or the page stopped
// meanwhile.
func (p *Page) pause(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		return false
	case <-p.done:
		return false
	case <-t.C:
		return true
	}
}
