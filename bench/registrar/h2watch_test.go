package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// seenEvent is what the test compares of a change event.
type seenEvent struct {
	typ     registrarv1.EndpointEvent_EventType
	address string
}

// watchLog collects one watcher's initial phase and change events.
type watchLog struct {
	mu       sync.Mutex
	items    int  // endpoints in the snapshot
	parts    int  // FULL_SNAPSHOT messages
	spanned  bool // a message came in more than one DATA frame (lean watcher only)
	complete bool
	events   []seenEvent
}

func (l *watchLog) add(ev event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.typ {
	case registrarv1.EndpointEvent_FULL_SNAPSHOT:
		l.items += ev.items
		l.parts++
	case registrarv1.EndpointEvent_SNAPSHOT_COMPLETE:
		l.complete = true
	case registrarv1.EndpointEvent_ENDPOINT_ADDED, registrarv1.EndpointEvent_ENDPOINT_REMOVED, registrarv1.EndpointEvent_ENDPOINT_UPDATED:
		l.events = append(l.events, seenEvent{ev.typ, string(ev.address)})
	}
}

func (l *watchLog) snapshot() (items, parts int, complete bool, events []seenEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.items, l.parts, l.complete, slices.Clone(l.events)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// preloadedRegistrar starts a registrar over a memory backend holding n endpoints,
// stopped when the test ends, and returns its address and a gRPC-go connection to it.
func preloadedRegistrar(t *testing.T, ctx context.Context, n int) (string, *grpc.ClientConn) {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { closeQuietly(b) })
	if err := preload(ctx, b, n); err != nil {
		t.Fatal(err)
	}
	srv, err := startRegistrar(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(conns) })
	return srv.Addr().String(), conns[0]
}

// TestLeanWatcherSeesWhatGRPCSees runs lean watchers and a gRPC-go watcher on a
// real registrar over loopback: the same snapshot (a few thousand endpoints, so
// its messages span DATA frames), the same SNAPSHOT_COMPLETE and the same events.
func TestLeanWatcherSeesWhatGRPCSees(t *testing.T) {
	saved := transport
	transport = transportOptions{watcher: "h2", batches: true}
	defer func() { transport = saved }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const preloaded = 3000
	addr, gconn := preloadedRegistrar(t, ctx, preloaded)
	// The reference: a gRPC-go watcher, as the -watcher grpc children read.
	gconns := []*grpc.ClientConn{gconn}
	var ref watchLog
	st, err := rawWatch(ctx, gconns[0], "ref", "")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		v := visit(ref.add)
		for st.RecvMsg(&v) == nil {
		}
	}()

	// Lean watchers on one connection, reading whole messages.
	fail := make(chan error, 16)
	c, err := dialH2(addr, func(err error) { fail <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	lean := make([]*watchLog, 3)
	for i := range lean {
		l := &watchLog{}
		lean[i] = l
		onMsg := func(s *h2Stream, msg []byte, size int) error {
			if len(msg) != size {
				return fmt.Errorf("got %d bytes of a %d-byte message", len(msg), size)
			}
			if size > 16384 { // gRPC-go sends DATA frames of at most 16 KiB
				l.mu.Lock()
				l.spanned = true
				l.mu.Unlock()
			}
			return eachEvent(msg, l.add)
		}
		req := &registrarv1.WatchEndpointsRequest{NodeName: fmt.Sprint("lean", i), AcceptBatches: true}
		if err := c.watch(req, 0, onMsg, func(err error) { fail <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	all := append([]*watchLog{&ref}, lean...)
	waitFor(t, 10*time.Second, "every watcher has its snapshot", func() bool {
		for _, l := range all {
			if _, _, done, _ := l.snapshot(); !done {
				return false
			}
		}
		return true
	})
	for i, l := range all {
		items, parts, _, _ := l.snapshot()
		if items != preloaded {
			t.Errorf("watcher %d: snapshot of %d endpoints, want %d", i, items, preloaded)
		}
		if i > 0 && parts < 2 {
			t.Errorf("watcher %d: snapshot in %d messages; the test wants several", i, parts)
		}
		if i > 0 && !l.spanned {
			t.Errorf("watcher %d: no message spanned DATA frames", i)
		}
	}

	// Changes: registrations and an unregistration, each to every watcher.
	api := registrarv1.NewRegistrarClient(gconns[0])
	const regs = 20
	var want []seenEvent
	for i := range regs {
		ep := fanoutEndpoint(i)
		if _, err := api.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep.ToProto()}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, seenEvent{registrarv1.EndpointEvent_ENDPOINT_ADDED, ep.Address})
	}
	gone := fanoutEndpoint(3)
	if _, err := api.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: []*registryv1.Endpoint{gone.ToProto()}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, seenEvent{registrarv1.EndpointEvent_ENDPOINT_REMOVED, gone.Address})
	waitFor(t, 10*time.Second, "every watcher has every change", func() bool {
		for _, l := range all {
			if _, _, _, evs := l.snapshot(); len(evs) < len(want) {
				return false
			}
		}
		return true
	})
	_, _, _, refEvents := ref.snapshot()
	if !slices.Equal(refEvents, want) {
		t.Fatalf("gRPC-go watcher saw %v, want %v", refEvents, want)
	}
	for i, l := range lean {
		if _, _, _, evs := l.snapshot(); !slices.Equal(evs, refEvents) {
			t.Errorf("lean watcher %d saw %v, gRPC-go %v", i, evs, refEvents)
		}
	}
	select {
	case err := <-fail:
		t.Fatalf("lean watcher failed: %v", err)
	default:
	}
}

// TestLeanWatchersHeads runs h2Watchers as the children do (heads only in the
// initial phase) against untilCompleteFast: the same bytes counted, every
// SNAPSHOT_COMPLETE whole, resumed streams too, and the events after it.
func TestLeanWatchersHeads(t *testing.T) {
	saved := transport
	transport = transportOptions{watcher: "h2", batches: true}
	defer func() { transport = saved }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, gconn := preloadedRegistrar(t, ctx, 2000)
	gconns := []*grpc.ClientConn{gconn}

	initialBytes.Store(0)
	st, err := rawWatch(ctx, gconns[0], "ref", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := untilCompleteFast(st); err != nil {
		t.Fatal(err)
	}
	perWatcher := initialBytes.Load()

	fail := make(chan error, 16)
	cs, err := dialH2N(addr, 2, func(err error) { fail <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer closeH2(cs)
	const n = 4
	var mu sync.Mutex
	var versions []string
	var added int
	complete := func(i int, msg []byte) error {
		ev, err := parseComplete(msg)
		mu.Lock()
		versions = append(versions, ev)
		mu.Unlock()
		return err
	}
	then := func(_ int, msg []byte) error {
		return eachEvent(msg, func(ev event) {
			if ev.typ == registrarv1.EndpointEvent_ENDPOINT_ADDED {
				mu.Lock()
				added++
				mu.Unlock()
			}
		})
	}
	initialBytes.Store(0)
	if _, err := h2Watchers(cs, make([]string, n), complete, then, func(err error) { fail <- err }); err != nil {
		t.Fatal(err)
	}
	if got := initialBytes.Load(); got != n*perWatcher {
		t.Errorf("lean watchers counted %d bytes of initial phase, want %d × %d", got, n, perWatcher)
	}
	mu.Lock()
	if len(versions) != n || versions[0] == "" {
		t.Errorf("SNAPSHOT_COMPLETE versions %q", versions)
	}
	tok := versions[0]
	mu.Unlock()
	// Two more, resuming from the version: no snapshot, just SNAPSHOT_COMPLETE.
	if _, err := h2Watchers(cs, []string{tok, tok}, complete, then, func(err error) { fail <- err }); err != nil {
		t.Fatal(err)
	}
	ep := fanoutEndpoint(0)
	if _, err := registrarv1.NewRegistrarClient(gconns[0]).RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep.ToProto()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every lean watcher has the registration", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return added == n+2
	})
	select {
	case err := <-fail:
		t.Fatalf("lean watcher failed: %v", err)
	default:
	}
}

// parseComplete is a SNAPSHOT_COMPLETE's version.
func parseComplete(msg []byte) (string, error) {
	ev := &registrarv1.EndpointEvent{}
	err := proto.Unmarshal(msg, ev)
	return ev.GetVersion(), err
}

// TestH2StreamReassembly cuts gRPC messages into frames at every size: split
// prefixes, messages spanning frames, several in one frame, empty ones, and kept
// heads.
func TestH2StreamReassembly(t *testing.T) {
	var wire []byte
	var want [][]byte
	for _, n := range []int{0, 1, 7, 100, 3000, 0, 40} {
		m := make([]byte, n)
		for i := range m {
			m[i] = byte(n + i)
		}
		want = append(want, m)
		wire = binary.BigEndian.AppendUint32(append(wire, 0), uint32(n))
		wire = append(wire, m...)
	}
	for _, keep := range []int{0, 5} {
		for frame := 1; frame <= len(wire); frame += 1 + frame/3 {
			var got [][]byte
			var sizes []int
			s := &h2Stream{keep: keep, onMsg: func(_ *h2Stream, msg []byte, size int) error {
				got, sizes = append(got, slices.Clone(msg)), append(sizes, size)
				return nil
			}}
			for p := wire; len(p) > 0; {
				k := min(frame, len(p))
				if err := s.data(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if len(got) != len(want) {
				t.Fatalf("keep %d, frames of %d: %d messages, want %d", keep, frame, len(got), len(want))
			}
			for i := range want {
				w := want[i]
				if keep > 0 {
					w = w[:min(keep, len(w))]
				}
				if !slices.Equal(got[i], w) || sizes[i] != len(want[i]) {
					t.Fatalf("keep %d, frames of %d: message %d = %d bytes (size %d), want %d (size %d)", keep, frame, i, len(got[i]), sizes[i], len(w), len(want[i]))
				}
			}
		}
	}
}

// TestLeanWatcherEnds stops the registrar under lean watchers: the connection
// reports the GOAWAY or its end and every stream its end, with an error, so a child
// fails loudly instead of waiting for events that never come.
func TestLeanWatcherEnds(t *testing.T) {
	saved := transport
	transport = transportOptions{watcher: "h2", batches: true}
	defer func() { transport = saved }()
	b := memory.New()
	defer closeQuietly(b)
	srv, err := startRegistrar(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	failed := make(chan error, 4)
	cs, err := dialH2N(srv.Addr().String(), 1, func(err error) { failed <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer closeH2(cs)
	ended := make(chan error, 2)
	if _, err := h2Watchers(cs, []string{"", ""}, nil, nil, func(err error) { ended <- err }); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	timeout := time.After(15 * time.Second)
	for range 2 {
		select {
		case err := <-ended:
			if err == nil {
				t.Fatal("a stream ended without an error")
			}
			t.Logf("stream: %v", err)
		case <-timeout:
			t.Fatal("streams did not end after the registrar stopped")
		}
	}
	select {
	case err := <-failed:
		t.Logf("connection: %v", err)
	case <-timeout:
		t.Fatal("the connection did not report its end")
	}
}
