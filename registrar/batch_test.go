package registrar

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// registerMany registers n endpoints of service in one request: the registrar
// appends their n events under one lock, so they are all waiting when a watcher's
// sender next looks.
func registerMany(t *testing.T, ts *testServer, service string, n int) {
	t.Helper()
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = ep("east", service, fmt.Sprintf("10.7.%d.%d", i/256, i%256), 80)
	}
	if _, err := ts.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps...)}); err != nil {
		t.Fatal(err)
	}
}

// changes reads n change events from w, taking a BATCH's events in order, and
// returns them with the number of messages they came in.
func (w *rawWatch) changes(t *testing.T, n int) ([]*registrarv1.EndpointEvent, int) {
	t.Helper()
	var out []*registrarv1.EndpointEvent
	msgs := 0
	for len(out) < n {
		ev := w.next(t)
		msgs++
		if ev.GetType() != registrarv1.EndpointEvent_BATCH {
			out = append(out, ev)
			continue
		}
		if len(ev.GetEvents()) < 2 {
			t.Fatalf("a BATCH of %d events: a lone event is sent on its own", len(ev.GetEvents()))
		}
		if proto.Size(ev) > hub.BatchBytes {
			t.Fatalf("a BATCH of %d bytes, over the cap of %d", proto.Size(ev), hub.BatchBytes)
		}
		out = append(out, ev.GetEvents()...)
	}
	return out, msgs
}

// TestBatchesOnlyForWatchersThatAsk: changes waiting together reach a watcher that
// accepts batches as one BATCH, and every other watcher one message each, with
// the same events in the same order.
func TestBatchesOnlyForWatchersThatAsk(t *testing.T) {
	ts := startServer(t, Config{})
	plain := openWatch(t, ts.client, "")
	batched := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{NodeName: "b", AcceptBatches: true})
	plain.untilComplete(t)
	batched.untilComplete(t)

	const n = 5
	registerMany(t, ts, "web", n)
	want, msgs := plain.changes(t, n)
	if msgs != n {
		t.Fatalf("the watcher without accept_batches got %d events in %d messages, want one each", n, msgs)
	}
	ev := batched.next(t)
	if ev.GetType() != registrarv1.EndpointEvent_BATCH || len(ev.GetEvents()) != n {
		t.Fatalf("the watcher with accept_batches got %v, want one BATCH of %d events", ev, n)
	}
	for i, got := range ev.GetEvents() {
		if got.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED || !proto.Equal(got, want[i]) {
			t.Fatalf("batched event %d = %v, sent alone it is %v", i, got, want[i])
		}
	}

	// A lone change is sent as it is.
	registerMany(t, ts, "db", 1)
	if ev := batched.next(t); ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED {
		t.Fatalf("a lone change came as %v, want ENDPOINT_ADDED", ev.GetType())
	}
}

// TestBatchesAreCapped: a burst larger than a batch comes in several batches,
// each under the cap, with every event once and in order.
func TestBatchesAreCapped(t *testing.T) {
	ts := startServer(t, Config{})
	w := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{AcceptBatches: true})
	w.untilComplete(t)

	const n = 3000 // about 150 bytes each: several 64 KiB batches
	registerMany(t, ts, "web", n)
	evs, msgs := w.changes(t, n)
	if msgs < 2 || msgs >= n/10 {
		t.Fatalf("%d events came in %d messages, want a few batches", n, msgs)
	}
	seen := map[endpoint.Key]bool{}
	var prev uint64
	for _, ev := range evs {
		v, err := token.Parse(ev.GetVersion())
		if err != nil || v.Seq != prev+1 && prev != 0 {
			t.Fatalf("version %s after seq %d: %v; want the next", ev.GetVersion(), prev, err)
		}
		prev = v.Seq
		seen[keyOf(ev.GetEndpoint())] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct endpoints in %d events, want %d", len(seen), len(evs), n)
	}
}

// TestBatchedResume: a watcher resuming from a token gets the changes it missed
// as a BATCH, then the SNAPSHOT_COMPLETE that ends the replay.
func TestBatchedResume(t *testing.T) {
	ts := startServer(t, Config{})
	first := openWatch(t, ts.client, "")
	_, done := first.untilComplete(t)
	registerMany(t, ts, "web", 4)

	w := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{LastVersion: done.GetVersion(), AcceptBatches: true})
	evs, complete := w.untilComplete(t)
	if len(evs) != 1 || len(evs[0].GetEvents()) != 4 {
		t.Fatalf("replay = %v, want one BATCH of the 4 missed changes", evs)
	}
	last := evs[0].GetEvents()[3].GetVersion()
	if !complete.GetResumed() || complete.GetVersion() != last {
		t.Fatalf("SNAPSHOT_COMPLETE %v after a replay up to %s", complete, last)
	}
}

// TestPacedWatcherBatchesWhatWaits: changes made one at a time, while a client
// that accepts batches does not read, wait in the ring once its flow-control
// window is full, and reach it as a few batches: the registrar does not queue
// them one by one in gRPC's transport (which takes 64 KiB a stream more before
// a send blocks). Here they come in about 15 messages; unpaced, about 70 (the
// ones queued in the transport one by one, then batches).
func TestPacedWatcherBatchesWhatWaits(t *testing.T) {
	ts := startServer(t, Config{})
	conn, err := grpc.NewClient(ts.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := testCtx(t)
	st, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{AcceptBatches: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Recv(); err != nil || ev.GetType() != registrarv1.EndpointEvent_SNAPSHOT_COMPLETE {
		t.Fatalf("first event = %v, %v", ev, err)
	}
	const n = 200
	pad := strings.Repeat("x", 2000)
	for i := range n {
		e := ep("east", "paced", fmt.Sprintf("10.9.%d.%d", i/256, i%256), 80)
		e.Annotations = map[string]string{"pad": pad}
		if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(e)}); err != nil {
			t.Fatal(err)
		}
	}
	// Only now does the client read. A PROGRESS may come too (on a slow machine
	// the registrations outlast a progress interval): only the changes count.
	added, msgs := 0, 0
	for added < n {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if k := addedIn(ev); k > 0 {
			msgs++
			added += k
		}
	}
	if added != n || msgs > 40 {
		t.Fatalf("%d changes made one at a time came as %d ADDED events in %d messages, want the ones that waited batched (about 15 messages)", n, added, msgs)
	}
}

// addedIn counts the ENDPOINT_ADDED events ev is or carries in a BATCH.
func addedIn(ev *registrarv1.EndpointEvent) int {
	if ev.GetType() != registrarv1.EndpointEvent_BATCH {
		return map[bool]int{true: 1}[ev.GetType() == registrarv1.EndpointEvent_ENDPOINT_ADDED]
	}
	n := 0
	for _, e := range ev.GetEvents() {
		n += addedIn(e)
	}
	return n
}
