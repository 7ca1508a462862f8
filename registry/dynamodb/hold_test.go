package dynamodb

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// testHoldTTL is shorter than registry.MinHoldTTL, which the Front enforces: the tests
// call the driver's Hold to keep their waits short. Renewals every 300 ms leave a
// slow machine room.
const testHoldTTL = 900 * time.Millisecond

// pollEvery is how often the tests read, as the registrar polls a backend without a
// change feed.
const pollEvery = 100 * time.Millisecond

func sameTable(of reg) func(*Config) { return func(c *Config) { c.Table = of.table } }

func takeHold(t *testing.T, r reg, ctx context.Context) registry.HoldID {
	t.Helper()
	id, err := r.driver.Hold(ctx, testHoldTTL)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	return id
}

func heldReg(e endpoint.Endpoint, id registry.HoldID) registry.Op {
	return registry.Op{Kind: registry.OpRegister, Endpoint: e, Hold: id}
}

func heldUnreg(e endpoint.Endpoint, id registry.HoldID) registry.Op {
	return registry.Op{Kind: registry.OpUnregister, Endpoint: e, Hold: id}
}

func mustApply(t *testing.T, r reg, ops ...registry.Op) {
	t.Helper()
	if err := r.Apply(testCtx(t), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func listed(t *testing.T, r reg, f endpoint.Filter) map[endpoint.Key]endpoint.Endpoint {
	t.Helper()
	got, err := r.List(testCtx(t), f)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	m := make(map[endpoint.Key]endpoint.Endpoint, len(got))
	for _, e := range got {
		m[e.Key()] = e
	}
	return m
}

// rawItem reads k's item as stored.
func rawItem(t *testing.T, srv *dynamotest.Server, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := rawClient(t, srv).GetItem(testCtx(t), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	return out.Item
}

// TestHoldEndsForOtherReaders: when a writer's hold ends, another driver on the table
// keeps seeing its entries for a while (agents re-home meanwhile), then stops within
// the hold's ttl plus one poll; an entry another hold took over, and one that lives by
// its own TTL, stay. DynamoDB has no change feed: a watcher of it is the registrar's
// poll, so the removal is observed as the difference between successive Lists.
func TestHoldEndsForOtherReaders(t *testing.T) {
	srv := dynamotest.Start(t)
	a := openTest(t, srv)
	b := openTest(t, srv, sameTable(a))
	actx, endA := context.WithCancel(testCtx(t))
	defer endA()
	idA, idB := takeHold(t, a, actx), takeHold(t, b, testCtx(t))
	x, y, plain := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80),
		ep("prod", "web", "http", "10.0.0.3", 80)
	x.TTL, y.TTL, plain.TTL = endpoint.TTL(time.Second), endpoint.TTL(time.Second), endpoint.Never
	mustApply(t, a, heldReg(x, idA), heldReg(y, idA), registry.Register(plain))
	mustApply(t, b, heldReg(y, idB))

	time.Sleep(time.Second + pollEvery) // past the entries' own TTL: held entries ignore it
	before := listed(t, b, endpoint.Filter{})
	if len(before) != 3 {
		t.Fatalf("before the hold ends, B lists %v; want x, y and the plain entry", keysOf(values(before)))
	}
	endA()
	ended := time.Now()
	if _, ok := listed(t, b, endpoint.Filter{})[x.Key()]; !ok {
		t.Fatal("an ended hold's entry went at once; it must outlive the hold by up to its ttl")
	}
	removed := pollRemovals(t, b, before, x.Key(), testHoldTTL+2*time.Second)
	took := time.Since(ended)
	if took > testHoldTTL+pollEvery+500*time.Millisecond {
		t.Errorf("x went %s after its hold ended; want within ttl %s + a poll", took, testHoldTTL)
	}
	if len(removed) != 1 || removed[0] != x.Key() {
		t.Errorf("the poll saw %v removed; want only %v", removed, x.Key())
	}
	after := listed(t, b, endpoint.Filter{})
	if !endpoint.Equal(after[y.Key()], y) || !endpoint.Equal(after[plain.Key()], plain) || len(after) != 2 {
		t.Errorf("after the hold ended B lists %v; want y (taken over) and the plain entry, unchanged", keysOf(values(after)))
	}
	if got := listed(t, a, endpoint.Filter{Service: "web"}); len(got) != 2 {
		t.Errorf("the ended hold's own driver lists %v; want the same two", keysOf(values(got)))
	}
}

// pollRemovals lists r every pollEvery, as the registrar polls, until key is gone,
// and returns every key that went meanwhile.
func pollRemovals(t *testing.T, r reg, prev map[endpoint.Key]endpoint.Endpoint, key endpoint.Key, within time.Duration) []endpoint.Key {
	t.Helper()
	var removed []endpoint.Key
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(pollEvery) {
		cur := listed(t, r, endpoint.Filter{})
		registry.Diff(prev, cur, func(a, b endpoint.Endpoint) bool { return endpoint.Equal(a, b) },
			func(ev registry.EventType, k endpoint.Key, _ endpoint.Endpoint) bool {
				if ev == registry.Removed {
					removed = append(removed, k)
				}
				return true
			})
		prev = cur
		if _, ok := cur[key]; !ok {
			return removed
		}
	}
	t.Fatalf("%v still listed %s after its hold ended", key, within)
	return nil
}

func values(m map[endpoint.Key]endpoint.Endpoint) []endpoint.Endpoint {
	out := make([]endpoint.Endpoint, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	return out
}

// TestHeldUnregister: a held removal deletes its own entry and leaves one another
// hold took over, in the same transaction as other ops, and is no error; a removal
// under a hold the driver never gave out fails with ErrNoHold and writes nothing.
func TestHeldUnregister(t *testing.T) {
	srv := dynamotest.Start(t)
	a := openTest(t, srv)
	b := openTest(t, srv, sameTable(a))
	idA, idB := takeHold(t, a, testCtx(t)), takeHold(t, b, testCtx(t))
	x, y, z := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80),
		ep("prod", "web", "http", "10.0.0.3", 80)
	mustApply(t, a, heldReg(x, idA), heldReg(y, idA))
	mustApply(t, b, heldReg(y, idB))
	mustApply(t, a, heldUnreg(y, idA), heldUnreg(x, idA), registry.Register(z))
	got := listed(t, b, endpoint.Filter{})
	if _, ok := got[x.Key()]; ok || len(got) != 2 || !endpoint.Equal(got[y.Key()], y) || !endpoint.Equal(got[z.Key()], z) {
		t.Fatalf("after A's held removals B lists %v; want y (B's) and z", keysOf(values(got)))
	}
	item := rawItem(t, srv, a.table, itemKey(y.Key()))
	if owner, _ := decodeOwner(item); owner != ownerName(idB, 1) {
		t.Errorf("y's owner is %q, want B's %q", owner, ownerName(idB, 1))
	}
	err := a.Apply(testCtx(t), []registry.Op{registry.Register(x), heldUnreg(y, "dynamodb-hold-unknown")})
	if !errors.Is(err, registry.ErrNoHold) {
		t.Fatalf("Apply under an unknown hold = %v, want ErrNoHold", err)
	}
	if _, ok := listed(t, a, endpoint.Filter{})[x.Key()]; ok {
		t.Error("a batch refused for an unknown hold wrote its other ops")
	}
}

// TestHeldEntryReadsAsRegistered: a held entry keeps its TTL as a value and no
// expiry, and reads back equal; the hold's ID is refused once the hold has ended and
// its heartbeat expired.
func TestHeldEntryReadsAsRegistered(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	ctx, end := context.WithCancel(testCtx(t))
	defer end()
	id := takeHold(t, r, ctx)
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.TTL, e.Node, e.Zone, e.Health = endpoint.TTL(30*time.Second), "n1", "eu-1a", endpoint.Draining
	e.Annotations = map[string]string{"k": "v"}
	mustApply(t, r, heldReg(e, id))
	if got := listed(t, r, endpoint.Filter{Service: "web"}); len(got) != 1 || !endpoint.Equal(got[e.Key()], e) {
		t.Fatalf("held entry reads back as %v, want %+v", values(got), e)
	}
	item := rawItem(t, srv, r.table, itemKey(e.Key()))
	if item[attrExpiresMs] != nil || item[attrExpiresAt] != nil || attrString(item, attrTTL) != "30s" {
		t.Errorf("held item %v: want a ttl value and no expiry of its own", item)
	}
	end()
	deadline := time.Now().Add(testHoldTTL + 2*time.Second)
	for {
		err := r.Apply(testCtx(t), []registry.Op{heldReg(e, id)})
		if errors.Is(err, registry.ErrNoHold) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Apply under an ended hold = %v, want ErrNoHold once its heartbeat expired", err)
		}
		time.Sleep(pollEvery)
	}
}

// TestUnownedItemsReadUnchanged: items as written before holds existed (no owner)
// read back as before, and reading them reads no heartbeat.
func TestUnownedItemsReadUnchanged(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	forever, timed := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "grpc", "10.0.0.2", 9090)
	forever.TTL, forever.Region = endpoint.Never, "eu"
	timed.TTL, timed.Annotations = endpoint.TTL(time.Hour), map[string]string{"a": "b"}
	raw := rawClient(t, srv)
	for _, e := range []endpoint.Endpoint{forever, timed} {
		if _, err := raw.PutItem(testCtx(t), &dynamodb.PutItemInput{
			TableName: aws.String(r.table), Item: encode(e, time.Now())}); err != nil {
			t.Fatal(err)
		}
	}
	srv.ResetRequests()
	got := listed(t, r, endpoint.Filter{})
	if len(got) != 2 || !endpoint.Equal(got[forever.Key()], forever) || !endpoint.Equal(got[timed.Key()], timed) {
		t.Fatalf("unowned items read back as %v", values(got))
	}
	if n := srv.Count("BatchGetItem"); n != 0 {
		t.Errorf("reading unowned entries read heartbeats %d times", n)
	}
}

// TestHeartbeatNeverAnEndpoint: the heartbeat item is in the table but no read path
// returns it or warns about it.
func TestHeartbeatNeverAnEndpoint(t *testing.T) {
	srv := dynamotest.Start(t)
	var logs syncBuffer
	r := openTest(t, srv, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := takeHold(t, r, testCtx(t))
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, r, heldReg(e, id))
	hb := rawItem(t, srv, r.table, heartbeatKey(ownerName(id, 1)))
	if hb == nil || hb[attrExpiresAt] == nil {
		t.Fatalf("heartbeat item %v: want one, with the table's TTL attribute", hb)
	}
	for _, f := range []endpoint.Filter{{}, {Cluster: "prod"}, {Service: "web"}, {Protocol: "http"}} {
		if got := listed(t, r, f); len(got) != 1 || !endpoint.Equal(got[e.Key()], e) {
			t.Errorf("List(%+v) = %v, want only %v", f, keysOf(values(got)), e.Key())
		}
	}
	if logs.String() != "" {
		t.Errorf("reads warned: %s", logs.String())
	}
}

// TestListReadsHeartbeatsOnce: one List over many held entries of two holds, read in
// several pages, reads the heartbeats in one BatchGetItem.
func TestListReadsHeartbeatsOnce(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv, func(c *Config) { c.PageSize = 4 })
	ids := []registry.HoldID{takeHold(t, r, testCtx(t)), takeHold(t, r, testCtx(t))}
	var ops []registry.Op
	for i := range 20 {
		ops = append(ops, heldReg(ep("prod", "web", "http", "10.0.1."+strconv.Itoa(i), 80), ids[i%2]))
	}
	mustApply(t, r, ops...)
	srv.ResetRequests()
	if got := listed(t, r, endpoint.Filter{}); len(got) != 20 {
		t.Fatalf("List = %d entries, want 20", len(got))
	}
	if n := srv.Count("BatchGetItem"); n != 1 {
		t.Errorf("one List read heartbeats in %d requests, want 1", n)
	}
}

// TestLapsedHoldStartsOver: when a hold's heartbeat expired (its writer was cut off
// for longer than ttl) its entries are gone for readers, and stay gone once the hold
// renews under the same ID; registered again under it, they live.
func TestLapsedHoldStartsOver(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	id := takeHold(t, r, testCtx(t))
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, r, heldReg(e, id))
	// The heartbeat as a partition would leave it: expired.
	if _, err := rawClient(t, srv).PutItem(testCtx(t), &dynamodb.PutItemInput{TableName: aws.String(r.table),
		Item: encodeHeartbeat(ownerName(id, 1), time.Now().Add(-time.Second).UnixMilli())}); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("entries of an expired heartbeat listed: %v", keysOf(values(got)))
	}
	deadline := time.Now().Add(testHoldTTL + 2*time.Second)
	for rawItem(t, srv, r.table, heartbeatKey(ownerName(id, 2))) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the hold did not start over after its heartbeat expired")
		}
		time.Sleep(pollEvery)
	}
	if got := listed(t, r, endpoint.Filter{}); len(got) != 0 {
		t.Fatalf("the renewed hold brought back the entries of its lapsed heartbeat: %v", keysOf(values(got)))
	}
	mustApply(t, r, heldReg(e, id))
	time.Sleep(testHoldTTL + pollEvery)
	if got := listed(t, r, endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("an entry registered again under the renewed hold lists as %v", keysOf(values(got)))
	}
}

// TestCloseEndsHolds: Close stops the renewals of a hold whose context still lives
// (goleak checks their goroutines end), and the heartbeat is left to expire.
func TestCloseEndsHolds(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	id := takeHold(t, r, context.Background())
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a hold whose context lives")
	}
	srv.ResetRequests()
	time.Sleep(testHoldTTL / 2)
	if n := srv.Count("PutItem"); n != 0 {
		t.Errorf("%d heartbeats written after Close", n)
	}
	if rawItem(t, srv, r.table, heartbeatKey(ownerName(id, 1))) == nil {
		t.Error("Close deleted the heartbeat: its entries must outlive the process by up to the ttl")
	}
}

// syncBuffer is a log sink safe for the driver's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(s.b.String())
}

// TestReaperDeletesDeadOwnersEntries: a driver that holds deletes the entries of a
// dead hold that its reads meet, one that does not hold only hides them, and the
// deletion leaves an entry another hold took over.
func TestReaperDeletesDeadOwnersEntries(t *testing.T) {
	srv := dynamotest.Start(t)
	a := openTest(t, srv)
	b := openTest(t, srv, sameTable(a))
	reader := openTest(t, srv, sameTable(a))
	b.reapAfter, reader.reapAfter = 0, 0
	actx, endA := context.WithCancel(testCtx(t))
	defer endA()
	idA, idB := takeHold(t, a, actx), takeHold(t, b, testCtx(t))
	x, y := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, a, heldReg(x, idA), heldReg(y, idA))
	mustApply(t, b, heldReg(y, idB))
	endA()
	deadline := time.Now().Add(testHoldTTL + 2*time.Second)
	for _, ok := listed(t, reader, endpoint.Filter{})[x.Key()]; ok; _, ok = listed(t, reader, endpoint.Filter{})[x.Key()] {
		if time.Now().After(deadline) {
			t.Fatal("x still listed after its hold ended")
		}
		time.Sleep(pollEvery)
	}
	time.Sleep(pollEvery)
	if rawItem(t, srv, a.table, itemKey(x.Key())) == nil {
		t.Fatal("a driver that does not hold deleted an entry")
	}
	// The deletion is conditional on the dead owner: y, taken over, stays.
	b.reapOne(testCtx(t), reapItem{key: y.Key(), owner: ownerName(idA, 1)})
	if rawItem(t, srv, a.table, itemKey(y.Key())) == nil {
		t.Fatal("reaping under the dead owner deleted an entry another hold took over")
	}
	listed(t, b, endpoint.Filter{})
	for rawItem(t, srv, a.table, itemKey(x.Key())) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the holding driver did not delete the dead hold's entry it read")
		}
		time.Sleep(pollEvery)
	}
	if got := listed(t, b, endpoint.Filter{}); len(got) != 1 || !endpoint.Equal(got[y.Key()], y) {
		t.Errorf("after reaping B lists %v, want y only", keysOf(values(got)))
	}
}
