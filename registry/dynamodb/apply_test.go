package dynamodb

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/registry"
)

func bulk(n int) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, n)
	for i := range n {
		eps[i] = ep("prod", "bulk", "http", fmt.Sprintf("10.1.%d.%d", i/256, i%256), 8080)
	}
	return eps
}

func registerOps(eps []endpoint.Endpoint) []registry.Op {
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	return ops
}

func listAll(t testing.TB, r registry.Registry) []endpoint.Endpoint {
	t.Helper()
	got, err := r.List(testCtx(t), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestApplyChunks: 250 ops become transactions of 100, 100 and 50 items.
func TestApplyChunks(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	srv.ResetRequests()
	if err := r.Apply(testCtx(t), registerOps(bulk(250))); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, q := range srv.Requests() {
		if q.Op == "TransactWriteItems" {
			sizes = append(sizes, q.Items)
		}
	}
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Errorf("transactions of %v items, want [100 100 50]", sizes)
	}
	if n := len(listAll(t, r)); n != 250 {
		t.Errorf("stored %d endpoints, want 250", n)
	}
}

// TestApplyCoalesces: a key written twice in a batch is sent once (DynamoDB, and
// minidyn, reject a transaction touching an item twice), with the last op's fields.
func TestApplyCoalesces(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a2 := a.Clone()
	a2.Priority = 9
	srv.ResetRequests()
	if err := r.Apply(testCtx(t), []registry.Op{registry.Register(a), registry.Unregister(a), registry.Register(a2)}); err != nil {
		t.Fatal(err)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Items != 1 {
		t.Errorf("requests %+v, want one transaction of one item", reqs)
	}
	if got := listAll(t, r); len(got) != 1 || got[0].Priority != 9 {
		t.Errorf("stored %+v, want priority 9", got)
	}
}

// TestChunksRespectByteLimit: large endpoints split before DynamoDB's 4 MB per
// transaction, keeping every key in order.
func TestChunksRespectByteLimit(t *testing.T) {
	r := &driver{table: "t"}
	big := strings.Repeat("x", 4096)
	var ops []registry.Op
	for i := range 30 {
		e := ep("prod", "web", "http", fmt.Sprintf("10.0.0.%d", i), 80)
		e.Annotations = map[string]string{}
		for j := range 64 {
			e.Annotations[fmt.Sprintf("k%d", j)] = big
		}
		ops = append(ops, registry.Register(e))
	}
	ops = append(ops, registry.Unregister(ep("prod", "web", "http", "10.9.9.9", 80)))
	chunks, err := r.chunks(ops, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 {
		t.Fatalf("30 endpoints of ~270 kB went into %d transaction(s), want a split at 4 MB", len(chunks))
	}
	var keys []endpoint.Key
	for _, c := range chunks {
		size := 0
		for _, it := range c.items {
			if it.Put != nil {
				size += itemSize(it.Put.Item)
			} else {
				size += itemSize(it.Delete.Key)
			}
		}
		if size > maxTxnBytes || len(c.items) > maxTxnItems || len(c.items) != len(c.keys) {
			t.Errorf("a transaction of %d items and %d bytes breaks the limits", len(c.items), size)
		}
		keys = append(keys, c.keys...)
	}
	for i, op := range ops {
		if keys[i] != op.Endpoint.Key() {
			t.Fatalf("transaction keys out of order at %d: %v, want %v", i, keys[i], op.Endpoint.Key())
		}
	}
}

// TestThrottlingRetried: throttled transactions are retried and succeed.
func TestThrottlingRetried(t *testing.T) {
	for name, fault := range map[string]dynamotest.Fault{
		"throughput exceeded":   dynamotest.Throttling(),
		"internal error":        dynamotest.InternalError(),
		"transaction conflict":  dynamotest.TransactionCanceled("None", "TransactionConflict"),
		"transaction throttled": dynamotest.TransactionCanceled("ThrottlingError", "None"),
	} {
		t.Run(name, func(t *testing.T) {
			srv := dynamotest.Start(t)
			r := openTest(t, srv)
			a, b := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80)
			srv.ResetRequests()
			srv.Fail("TransactWriteItems", 2, fault)
			if err := r.Apply(testCtx(t), registerOps([]endpoint.Endpoint{a, b})); err != nil {
				t.Fatalf("Apply after two transient failures: %v", err)
			}
			if n := srv.Count("TransactWriteItems"); n != 3 {
				t.Errorf("%d attempts, want 3 (two failures, one success)", n)
			}
			if got := listAll(t, r); len(got) != 2 {
				t.Errorf("stored %d endpoints, want 2", len(got))
			}
		})
	}
}

// TestThrottlingExhausted: persistent throttling ends after MaxAttempts with an
// ApplyError naming every unwritten key and matching registry.ErrUnavailable.
func TestThrottlingExhausted(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv, func(c *Config) { c.MaxAttempts = 4 })
	eps := bulk(3)
	srv.ResetRequests()
	srv.Fail("TransactWriteItems", 100, dynamotest.Throttling())
	err := r.Apply(testCtx(t), registerOps(eps))
	srv.ClearFaults()
	var ae *registry.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("Apply under throttling = %v, want a *registry.ApplyError", err)
	}
	if !slices.Equal(ae.Failed, keysOf(eps)) {
		t.Errorf("ApplyError.Failed = %v, want %v", ae.Failed, keysOf(eps))
	}
	if !errors.Is(err, registry.ErrUnavailable) || !strings.Contains(err.Error(), "ProvisionedThroughputExceeded") {
		t.Errorf("error %q should match ErrUnavailable and say it was throttled", err)
	}
	if n := srv.Count("TransactWriteItems"); n != 4 {
		t.Errorf("%d attempts, want MaxAttempts = 4", n)
	}
	if got := listAll(t, r); len(got) != 0 {
		t.Errorf("a failed transaction stored %d endpoints", len(got))
	}
}

// TestCancelledTransactionReported: a cancellation that would fail again is not
// retried, and the error names the key that caused it.
func TestCancelledTransactionReported(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	a, b := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80)
	srv.ResetRequests()
	srv.Fail("TransactWriteItems", 1, dynamotest.TransactionCanceled("None", "ConditionalCheckFailed"))
	err := r.Apply(testCtx(t), registerOps([]endpoint.Endpoint{a, b}))
	var ae *registry.ApplyError
	if !errors.As(err, &ae) || len(ae.Failed) != 2 {
		t.Fatalf("Apply = %v, want an ApplyError for both keys of the atomic transaction", err)
	}
	if !strings.Contains(err.Error(), b.Key().String()+": ConditionalCheckFailed") || strings.Contains(err.Error(), a.Key().String()+":") {
		t.Errorf("error %q should blame %s alone", err, b.Key())
	}
	if errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("a conditional failure is not unavailability: %v", err)
	}
	if n := srv.Count("TransactWriteItems"); n != 1 {
		t.Errorf("%d attempts, want 1: retrying cannot help", n)
	}
}

// TestLaterChunkFails: earlier transactions stay written; the error names the keys
// of the failed transaction and of every one after it.
func TestLaterChunkFails(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv, func(c *Config) { c.MaxAttempts = 2 })
	eps := bulk(250)
	srv.Fail("TransactWriteItems", 1, dynamotest.Pass())
	srv.Fail("TransactWriteItems", 2, dynamotest.InternalError())
	err := r.Apply(testCtx(t), registerOps(eps))
	var ae *registry.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("Apply = %v, want an ApplyError", err)
	}
	if !slices.Equal(ae.Failed, keysOf(eps[100:])) {
		t.Errorf("Failed has %d keys, want the last 150", len(ae.Failed))
	}
	if !strings.Contains(err.Error(), "transaction 2 of 3") || !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("error %q should name transaction 2 of 3 and match ErrUnavailable", err)
	}
	if got := listAll(t, r); !slices.Equal(keysOf(got), keysOf(sorted(eps[:100]))) {
		t.Errorf("stored %d endpoints, want the first transaction's 100", len(got))
	}
}

func sorted(eps []endpoint.Endpoint) []endpoint.Endpoint {
	out := slices.Clone(eps)
	endpoint.Sort(out)
	return out
}

func TestTransientCancelClassification(t *testing.T) {
	for _, c := range []struct {
		reasons []string
		want    bool
	}{
		{[]string{"None", "TransactionConflict"}, true},
		{[]string{"ThrottlingError", "ProvisionedThroughputExceeded"}, true},
		{[]string{"TransactionConflict", "ConditionalCheckFailed"}, false},
		{[]string{"ValidationError"}, false},
		{[]string{"None"}, false},
	} {
		if got := unavailable(cancelled(c.reasons...)); got != c.want {
			t.Errorf("cancellation %v retryable = %v, want %v", c.reasons, got, c.want)
		}
	}
}

func cancelled(reasons ...string) error {
	tce := &types.TransactionCanceledException{Message: aws.String("cancelled")}
	for _, r := range reasons {
		tce.CancellationReasons = append(tce.CancellationReasons, types.CancellationReason{Code: aws.String(r)})
	}
	return tce
}

// TestListRetriesAndReportsUnavailable: reads are retried like writes, and a read
// that still fails matches registry.ErrUnavailable.
func TestListRetriesAndReportsUnavailable(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv, func(c *Config) { c.MaxAttempts = 3 })
	register(t, r, bulk(2)...)
	f := endpoint.Filter{Service: "bulk"}
	srv.Fail("Query", 2, dynamotest.Throttling())
	if got, err := r.List(testCtx(t), f); err != nil || len(got) != 2 {
		t.Fatalf("List after two throttles = %d endpoints, %v; want 2", len(got), err)
	}
	srv.ResetRequests()
	srv.Fail("Query", 3, dynamotest.Throttling())
	if _, err := r.List(testCtx(t), f); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("List throttled past MaxAttempts = %v, want ErrUnavailable", err)
	}
	if n := srv.Count("Query"); n != 3 {
		t.Errorf("%d Query attempts, want MaxAttempts = 3", n)
	}
}
