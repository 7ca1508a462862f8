package registrar

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// laggingFeed wraps a real backend whose change feed delivers every event lag
// after the backend sent it, in order: a write is confirmed (Apply returned) well
// before its echo arrives, as on a loaded machine or a remote backend.
type laggingFeed struct {
	registry.Registry
	lag time.Duration
}

func (b *laggingFeed) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	in, err := b.Registry.(registry.Watcher).Watch(ctx, f)
	if err != nil {
		return nil, err
	}
	type stamped struct {
		ev registry.Event
		at time.Time
	}
	held := make(chan stamped, 4096)
	go func() {
		defer close(held)
		for ev := range in {
			held <- stamped{ev, time.Now()}
		}
	}()
	out := make(chan registry.Event)
	go func() {
		defer close(out)
		for s := range held {
			time.Sleep(time.Until(s.at.Add(b.lag)))
			select {
			case out <- s.ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// An endpoint registered, then unregistered, stays removed when the echoes of
// both writes arrive after both were confirmed: the echo of the older write does
// not bring it back, even for a moment. (Before, the echo of the register was
// applied as news, so watchers saw the removed endpoint added again, then removed
// once more when the second echo came.)
func TestLateEchoOfAnOlderWriteDoesNotResurrect(t *testing.T) {
	const lag = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	ts := startServer(t, Config{Backend: &laggingFeed{Registry: mem, lag: lag}, BatchInterval: 5 * time.Millisecond})
	r := ts.Registrar()
	ctx := testCtx(t)
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)

	x := ep("east", "web", "10.0.0.1", 80)
	confirmed := func() bool { return r.view.PendingCount() == 0 }
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(x)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the register is confirmed", confirmed)
	if _, err := ts.client.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: protos(x)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unregister is confirmed", confirmed)
	if got := w.next(t).GetType(); got != registrarv1.EndpointEvent_ENDPOINT_ADDED {
		t.Fatalf("first event %v, want ADDED", got)
	}
	if got := w.next(t).GetType(); got != registrarv1.EndpointEvent_ENDPOINT_REMOVED {
		t.Fatalf("second event %v, want REMOVED", got)
	}
	// Both echoes arrive within 2 lags of the writes; nothing may follow.
	w.quiet(t, 3*lag)
}

// Writes of somebody else (another replica, an operator) between and after ours
// still apply, in the feed's order: remembering our writes hides only their own
// echoes.
func TestForeignWritesAfterOursStillApply(t *testing.T) {
	const lag = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	ts := startServer(t, Config{Backend: &laggingFeed{Registry: mem, lag: lag}, BatchInterval: 5 * time.Millisecond})
	r := ts.Registrar()
	ctx := testCtx(t)
	x := ep("east", "web", "10.0.0.1", 80)
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(x)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the register is confirmed", func() bool { return r.view.PendingCount() == 0 })
	if err := mem.Apply(ctx, []registry.Op{{Kind: registry.OpUnregister, Endpoint: x}}); err != nil {
		t.Fatal(err)
	}
	other := x
	other.Address = "10.0.0.2"
	if err := mem.Apply(ctx, []registry.Op{{Kind: registry.OpRegister, Endpoint: other}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the foreign writes are in the snapshot", func() bool {
		var in bool
		r.view.Read(func(h view.Reader) {
			_, hasX := h.Lookup(x.Key())
			_, hasOther := h.Lookup(other.Key())
			in = !hasX && hasOther
		})
		return in
	})
	if n := r.view.WaitingEchoes(); n != 0 {
		t.Fatalf("%d keys still wait for an echo", n)
	}
}
