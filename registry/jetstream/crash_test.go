package jetstream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestRemovalsSurviveServerCrashes: nats-server's crash recovery can bring back
// messages that the one-message-per-subject limit had removed; they stay hidden only
// while a newer message on the subject exists. So unregistered entries must stay
// unregistered however often the server is SIGKILLed and for however long afterwards,
// whatever the TTL they were registered with. The marker TTL is short so that
// anything which lives only that long has expired before the last look.
func TestRemovalsSurviveServerCrashes(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	srv := startNATSProcess(t, ctx, natsProcessOptions{SyncAlways: true})
	nc := connect(t, srv.URL())
	cfg := freshStream() // marker TTL 1s
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg, Logger: testLogger(t)})

	const n = 200
	regs := make([]registry.Op, n)
	unregs := make([]registry.Op, n)
	for i := range n {
		e := ep("prod", fmt.Sprintf("svc%d", i%4), "http", ipv4(i), 8080)
		switch i % 4 { // every kind of lifetime an entry can have
		case 1:
			e.TTL = endpoint.Never
		case 2:
			e.TTL = endpoint.TTL(time.Hour)
		case 3:
			e.TTL = endpoint.TTL(10 * time.Minute)
		}
		regs[i], unregs[i] = registry.Register(e), registry.Unregister(e)
	}
	mustApply(t, ctx, r, regs...)
	mustApply(t, ctx, r, unregs...)
	if got := mustList(t, ctx, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("after unregistering all List has %d entries", len(got))
	}

	resurrected := func() int {
		t.Helper()
		var got []endpoint.Endpoint
		var err error
		eventually(t, 20*time.Second, "List works after the restart", func() bool {
			got, err = r.List(ctx, endpoint.Filter{})
			return err == nil
		})
		return len(got)
	}
	for i := 1; i <= 3; i++ {
		time.Sleep(time.Second)
		srv.crash(ctx)
		if live := resurrected(); live != 0 {
			t.Errorf("after crash %d: %d of %d unregistered entries are live again", i, live, n)
		}
	}
	// Anything that lives only as long as the marker TTL is gone by now.
	time.Sleep(3 * cfg.MarkerTTL)
	if live := resurrected(); live != 0 {
		t.Errorf("%s after the last crash: %d of %d unregistered entries are live again", 3*cfg.MarkerTTL, live, n)
	}
	srv.crash(ctx)
	time.Sleep(3 * cfg.MarkerTTL)
	if live := resurrected(); live != 0 {
		t.Errorf("after a fourth crash and %s: %d of %d unregistered entries are live again", 3*cfg.MarkerTTL, live, n)
	}
}
