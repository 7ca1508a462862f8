package registrar

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/toxictest"
)

// A watcher behind a slow link (toxiproxy, 16 KiB/s towards the watcher) reads all
// the time, but slower than the registrar sends: it is a slow watcher like one that
// stops reading. It holds up only itself (the fast watcher gets every event of the
// burst), falls behind the ring and is resynced, and once the link is fast again it
// ends with the right state.
func TestWatcherBehindASlowLinkIsASlowWatcher(t *testing.T) {
	ts := startServer(t, Config{History: 64})
	fast := openWatch(t, ts.client, "")
	fast.untilComplete(t)

	proxy := toxictest.Start(t, "watcher", ts.Addr().String())
	conn, err := grpc.NewClient(proxy.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	st, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	slow := readWatch(t, st.Recv, cancel)
	if _, done := slow.untilComplete(t); done == nil {
		t.Fatal("no snapshot through the proxy")
	}
	proxy.Narrow(16)

	const n = 400
	burst(t, ts, fast, 4, n) // fails if the fast watcher misses an event or stalls
	eventually(t, "the slow-link watcher is resynced", func() bool {
		return counterValue(t, ts, "registrar_watcher_resyncs_total") >= 1
	})
	proxy.Heal()
	state := map[endpoint.Key]bool{}
	resynced := false
	deadline := time.After(30 * time.Second)
	for len(state) < n {
		var ev *registrarv1.EndpointEvent
		select {
		case ev = <-slow.events:
		case <-deadline:
			t.Fatalf("the slow-link watcher has %d of %d endpoints after 30s", len(state), n)
		}
		switch ev.GetType() {
		case registrarv1.EndpointEvent_FULL_SNAPSHOT:
			if !resynced {
				clear(state)
			}
			resynced = true
			for k := range snapshotKeys([]*registrarv1.EndpointEvent{ev}) {
				state[k] = true
			}
		case registrarv1.EndpointEvent_ENDPOINT_ADDED:
			state[keyOf(ev.GetEndpoint())] = true
		}
	}
	if !resynced {
		t.Fatal("the slow-link watcher converged without a resync: it never fell behind, and the test proves nothing")
	}
}
