package registrar

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

const testSession = "0f5c2d7e9a1b4c3d8e6f7a9b0c1d2e3f"

func heldServer(t *testing.T, liveness time.Duration) (*testServer, *registry.Front) {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	return startServer(t, Config{Backend: b, LivenessTTL: liveness, BatchInterval: 10 * time.Millisecond}), b
}

func ttlEndpoint(addr string, ttl time.Duration) endpoint.Endpoint {
	e := ep("east", "web", addr, 80)
	e.TTL = endpoint.TTL(ttl)
	return e
}

func registerIn(t *testing.T, ts *testServer, session string, eps ...endpoint.Endpoint) bool {
	t.Helper()
	resp, err := ts.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps...), Session: session})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetHeld()
}

func backendKeys(t *testing.T, b registry.Registry) []string {
	t.Helper()
	eps, err := b.List(testCtx(t), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	return out
}

// A session names itself in letters, digits, '-' and '_', at most 64 of them; a
// write or a watch with another is refused, naming the field, and stores nothing.
func TestSessionIsValidated(t *testing.T) {
	ts, b := heldServer(t, 3*time.Second)
	for _, bad := range []string{"has space", "semi;colon", strings.Repeat("a", 65), "ünï"} {
		_, err := ts.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(ep("east", "web", "10.0.0.1", 80)), Session: bad})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "session") {
			t.Errorf("register with session %q: %v, want InvalidArgument naming the session", bad, err)
		}
		st, err := ts.client.WatchEndpoints(testCtx(t), &registrarv1.WatchEndpointsRequest{Session: bad})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "session") {
			t.Errorf("watch with session %q: %v, want InvalidArgument naming the session", bad, err)
		}
	}
	if got := backendKeys(t, b); len(got) != 0 {
		t.Fatalf("refused writes stored %v", got)
	}
}

// The registrar holds a session's registrations only while a stream of that session
// is open to it, and only when it holds liveness at all.
func TestHeldOnlyWhileTheSessionsStreamIsOpen(t *testing.T) {
	ts, _ := heldServer(t, 3*time.Second)
	e := ttlEndpoint("10.0.0.1", 2*time.Second)
	if registerIn(t, ts, testSession, e) {
		t.Fatal("held before any stream of the session was open")
	}
	w := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{Session: testSession})
	w.untilComplete(t)
	if !registerIn(t, ts, testSession, e) {
		t.Fatal("not held with the session's stream open")
	}
	if registerIn(t, ts, "another-session", ttlEndpoint("10.0.0.2", 2*time.Second)) {
		t.Fatal("held for a session with no stream open")
	}
	if registerIn(t, ts, "", ttlEndpoint("10.0.0.3", 2*time.Second)) {
		t.Fatal("held without a session")
	}
	w.cancel()
	eventually(t, "the stream's end is seen", func() bool { return !registerIn(t, ts, testSession, e) })

	off, _ := heldServer(t, 0)
	w = openWatchReq(t, off.client, &registrarv1.WatchEndpointsRequest{Session: testSession})
	w.untilComplete(t)
	if registerIn(t, off, testSession, e) {
		t.Fatal("held by a registrar with liveness off")
	}
}

// A held entry outlives its TTL in the backend while its session's stream is open,
// and goes its TTL after the stream ends.
func TestHeldEntryLivesWithItsStream(t *testing.T) {
	ts, b := heldServer(t, 3*time.Second)
	w := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{Session: testSession})
	w.untilComplete(t)
	e := ttlEndpoint("10.0.0.1", time.Second)
	if !registerIn(t, ts, testSession, e) {
		t.Fatal("not held")
	}
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs, no refresh
	if got := backendKeys(t, b); !slices.Equal(got, []string{e.Key().String()}) {
		t.Fatalf("with the stream open, past the TTL, the backend holds %v", got)
	}
	w.cancel()
	eventually(t, "the entry goes after its stream ended", func() bool { return len(backendKeys(t, b)) == 0 })
}

// An entry of a live session that the backend lost (here another writer removed
// it; a hold that ran out in a partition looks the same) is registered again.
func TestHeldEntryTheBackendLostIsRegisteredAgain(t *testing.T) {
	ts, b := heldServer(t, 3*time.Second)
	w := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{Session: testSession})
	w.untilComplete(t)
	e := ttlEndpoint("10.0.0.1", 30*time.Second)
	if !registerIn(t, ts, testSession, e) {
		t.Fatal("not held")
	}
	eventually(t, "the entry is stored", func() bool { return len(backendKeys(t, b)) == 1 })
	if err := b.Apply(testCtx(t), []registry.Op{registry.Unregister(e)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lost entry is registered again", func() bool { return len(backendKeys(t, b)) == 1 })
}

// On a backend whose held entries also expire on their own (registry.HoldRefresher),
// every held entry is written again within the refresh period: entries all written
// at once (a replica's start) never wait longer than the period, each pass writes
// no more than spreads them over a quarter of it, and on average each entry is
// written once per 3/4 period.
func TestHeldEntriesAreWrittenAgainWithinTheRefreshPeriod(t *testing.T) {
	const n, refresh = 1000, time.Hour
	l := newLiveness()
	l.setHold("h")
	l.opened("s", nil)
	ops := make([]registry.Op, n)
	for i := range ops {
		e := ttlEndpoint(fmt.Sprintf("10.0.%d.%d", i/256, i%256), time.Minute)
		ops[i] = registry.Op{Kind: registry.OpRegister, Endpoint: e, Hold: "h"}
	}
	t0 := time.Unix(1_000_000, 0)
	l.took("s", ops)
	l.wrote(ops, t0.Unix())
	last := map[endpoint.Key]int64{}
	for _, op := range ops {
		last[op.Endpoint.Key()] = t0.Unix()
	}
	var longest int64
	writes, maxPass := 0, 0
	for now := t0; now.Before(t0.Add(10 * refresh)); now = now.Add(restoreEvery * time.Second) {
		b, limit := refreshDue(refresh, n, now)
		_, due := pick(l.live(), noneLost, b, limit)
		for _, op := range due {
			k := op.Endpoint.Key()
			longest = max(longest, now.Unix()-last[k])
			last[k] = now.Unix()
			if op.Hold != "h" {
				t.Fatalf("refresh of %s not under the hold: %+v", k, op)
			}
		}
		l.wrote(due, now.Unix())
		if now.After(t0.Add(refresh)) {
			writes += len(due)
		}
		maxPass = max(maxPass, len(due))
	}
	for k, at := range last {
		longest = max(longest, t0.Add(10*refresh).Unix()-at)
		_ = k
	}
	if longest > int64(refresh/time.Second) {
		t.Errorf("an entry went %ds without a write; the backend expires it after %s", longest, refresh)
	}
	// After the first period: about n per 3/4 refresh, so over nine periods 12n.
	if want := 12 * n; writes > want*11/10 || writes < want*9/10 {
		t.Errorf("%d writes over the nine periods after the first, want about %d", writes, want)
	}
	if limit := n * restoreEvery * 4 / int(refresh/time.Second); maxPass > limit+1 {
		t.Errorf("a pass wrote %d entries, more than the %d that spread them over a quarter period", maxPass, limit+1)
	}
	// A backend without the need: nothing is written again.
	b, limit := refreshDue(0, n, t0.Add(10*refresh))
	if _, due := pick(l.live(), noneLost, b, limit); len(due) != 0 {
		t.Errorf("refresh 0: %d entries written again", len(due))
	}
}

func noneLost(endpoint.Endpoint) bool { return false }
