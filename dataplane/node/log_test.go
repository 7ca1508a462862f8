package node_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// TestLogRecordsNameEachAttributeOnce: the log lines of a fabric — its control
// plane, its nodes and their controllers — carry each attribute once, whoever adds
// it (slog's text and JSON handlers print a key given twice twice).
func TestLogRecordsNameEachAttributeOnce(t *testing.T) {
	h := &keyCheck{mu: &sync.Mutex{}, dups: new([]string), msgs: map[string]bool{}}
	f := startFabricWith(t, fabric.Options{Topology: "links:\n  - group: a\n    neighbors: [b]\n", Logger: slog.New(h)}, 1, "a", "b")
	f.StopControlPlane() // the controllers log the session's end
	ctx := deadline(t, 20*time.Second)
	for _, msg := range []string{"node running", "control-plane session ended; reconnecting"} {
		for !h.logged(msg) {
			select {
			case <-ctx.Done():
				t.Fatalf("no log record %q", msg)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range *h.dups {
		t.Error(d)
	}
}

// keyCheck is a slog.Handler that records every record naming an attribute twice,
// counting the attributes added with WithAttrs.
type keyCheck struct {
	mu   *sync.Mutex
	dups *[]string
	msgs map[string]bool // the messages logged
	with []string
}

func (h *keyCheck) logged(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.msgs[msg]
}

func (h *keyCheck) Enabled(context.Context, slog.Level) bool { return true }

func (h *keyCheck) Handle(_ context.Context, r slog.Record) error {
	keys := slices.Clone(h.with)
	r.Attrs(func(a slog.Attr) bool { keys = append(keys, a.Key); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs[r.Message] = true
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			*h.dups = append(*h.dups, "log record "+r.Message+" names "+k+" twice")
		}
		seen[k] = true
	}
	return nil
}

func (h *keyCheck) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.with = slices.Clone(h.with)
	for _, a := range as {
		c.with = append(c.with, a.Key)
	}
	return &c
}

// WithGroup counts a group's keys with the others: none of these logs uses groups,
// and one that did would be reported here rather than missed.
func (h *keyCheck) WithGroup(string) slog.Handler { return h }
