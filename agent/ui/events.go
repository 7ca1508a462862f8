package ui

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

const (
	// coalesce gathers the changes that come close together into one message:
	// a burst of check results costs an open page one fetch.
	coalesce = 200 * time.Millisecond
	// writeTimeout bounds one write to a stream, so a client that stopped reading
	// does not hold a slot for ever.
	writeTimeout = 10 * time.Second
)

// serveEvents is the page's event stream: one message when it opens, then one per
// change of the Source's version, no more often than coalesce, and a comment every
// heartbeat. The message's data is the version; the page only needs to know that
// something changed.
func (p *Page) serveEvents(w http.ResponseWriter, r *http.Request) {
	// The script passes on the page's query string: check it like the page does.
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		refuse(w, http.StatusServiceUnavailable, "too many open event streams; the page polls instead")
		return
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{}) // the connection may serve other requests
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	send := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	heartbeat := time.NewTicker(p.o.Heartbeat)
	defer heartbeat.Stop()
	// The first message covers what changed between the page's rendering and
	// the stream's opening.
	v, next := p.o.Source.Changes()
	if !send(message(v)) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.o.Done: // nil, and never ready, without one
			return
		case <-heartbeat.C:
			if !send(": heartbeat\n\n") {
				return
			}
			continue
		case <-next:
		}
		if !p.sleep(ctx, coalesce) {
			return
		}
		v, next = p.o.Source.Changes()
		if !send(message(v)) {
			return
		}
	}
}

func message(v uint64) string { return "data: " + strconv.FormatUint(v, 10) + "\n\n" }

// sleep waits for d, or reports false if ctx ends or Done closes first.
func (p *Page) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-p.o.Done:
	}
	return false
}
