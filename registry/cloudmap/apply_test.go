package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// asApplyError checks err is an ApplyError naming exactly want.
func asApplyError(t *testing.T, err error, want ...endpoint.Endpoint) *registry.ApplyError {
	t.Helper()
	var ae *registry.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not a *registry.ApplyError", err, err)
	}
	var wantKeys []endpoint.Key
	for _, e := range want {
		wantKeys = append(wantKeys, e.Key())
		if !strings.Contains(err.Error(), e.Key().String()) {
			t.Errorf("error %q does not name %s", err, e.Key())
		}
	}
	if !slices.Equal(ae.Failed, wantKeys) {
		t.Fatalf("ApplyError.Failed = %v, want %v", ae.Failed, wantKeys)
	}
	return ae
}

func TestOperationFailIsApplyError(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	f.fake.FailNext(a.InstanceID(), "INVALID_CHANGE_BATCH", "injected failure")

	err := f.reg.Apply(f.ctx, []registry.Op{registry.Register(a), registry.Register(b)})
	asApplyError(t, err, a)
	var opErr *OperationError
	if !errors.As(err, &opErr) || opErr.Code != "INVALID_CHANGE_BATCH" || opErr.Message != "injected failure" || opErr.Type != "REGISTER_INSTANCE" {
		t.Fatalf("error %v does not carry the failed operation (got %+v)", err, opErr)
	}
	if errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("a permanent FAIL code is reported as ErrUnavailable: %v", err)
	}
	// The rest of the batch was written; the failed key was not.
	if got := keyStrings(f.list(endpoint.Filter{})); !slices.Equal(got, keyStrings([]endpoint.Endpoint{b})) {
		t.Fatalf("after a partly failed batch List = %v, want only %s", got, b.Key())
	}

	// A failed deregistration leaves the endpoint and is reported the same way; a
	// transient FAIL code is retryable.
	f.fake.FailNext(b.InstanceID(), "INTERNAL_FAILURE", "try later")
	err = f.reg.Apply(f.ctx, []registry.Op{registry.Unregister(b)})
	asApplyError(t, err, b)
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("INTERNAL_FAILURE is not reported as ErrUnavailable: %v", err)
	}
	if got := f.list(endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("after a failed deregistration List = %v, want b still there", keyStrings(got))
	}
}

func TestOperationTimeout(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{OperationTimeout: 300 * time.Millisecond})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	f.fake.Hold(a.InstanceID(), true)
	err := f.reg.Apply(f.ctx, []registry.Op{registry.Register(b), registry.Register(a)})
	asApplyError(t, err, a)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("timeout error %v should match context.DeadlineExceeded and registry.ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "still PENDING") {
		t.Errorf("timeout error %q does not say the operation is still pending", err)
	}
	// Released, the operation finishes when next polled — by the next write of the key.
	f.fake.Hold(a.InstanceID(), false)
	f.apply(registry.Register(a))
	if got := f.list(endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("List = %v, want both", keyStrings(got))
	}
}

func TestAnnotationsTooLargeRejectBatch(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	good := ep("prod", "web", "http", "10.0.0.1", 80)
	big := ep("prod", "web", "http", "10.0.0.2", 80)
	big.Annotations = map[string]string{"a": strings.Repeat("x", 2000), "b": strings.Repeat("y", 2000), "c": strings.Repeat("z", 2000)}
	err := f.reg.Apply(f.ctx, []registry.Op{registry.Register(good), registry.Register(big)})
	asApplyError(t, err, big)
	if !errors.Is(err, endpoint.ErrInvalid) || !strings.Contains(err.Error(), "annotations") || !strings.Contains(err.Error(), "5000") {
		t.Fatalf("oversized endpoint: error %q should match endpoint.ErrInvalid and name annotations and the limit", err)
	}
	if n := f.fake.Calls("RegisterInstance"); n != 0 {
		t.Fatalf("%d RegisterInstance calls were sent for a rejected batch", n)
	}
}

func TestLargeAnnotationsSpanAttributes(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.Annotations = map[string]string{"a": strings.Repeat("é", 1500), "b": strings.Repeat("x", 900)}
	f.apply(registry.Register(e))
	attrs, ok := f.fake.Instance(e.InstanceID())
	if !ok || attrs["annotations.1"] == "" || attrs["annotations.2"] == "" {
		t.Fatalf("stored attributes %v: want annotations split over annotations, .1 and .2", attrKeys(attrs))
	}
	got := f.list(endpoint.Filter{})
	if len(got) != 1 || !endpoint.Equal(got[0], e) {
		t.Fatal("annotations spanning several attributes did not round-trip")
	}
}

func attrKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestThrottlingIsRetried(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	f.fake.Throttle(3)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	f.apply(registry.Register(a))
	if got := f.list(endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("List = %v", keyStrings(got))
	}
}

func TestUnavailable(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	f.fake.Close()
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	err := f.reg.Apply(f.ctx, []registry.Op{registry.Register(a)})
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Apply with Cloud Map down: %v, want registry.ErrUnavailable", err)
	}
	asApplyError(t, err, a)
	if _, err := f.reg.List(f.ctx, endpoint.Filter{}); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("List with Cloud Map down: %v, want registry.ErrUnavailable", err)
	}
}

func TestCloseInterruptsApply(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	f.fake.Hold(a.InstanceID(), true)
	done := make(chan error, 1)
	go func() { done <- f.reg.Apply(f.ctx, []registry.Op{registry.Register(a)}) }()
	f.eventually("registration submitted", func() bool { return f.fake.Calls("GetOperation") > 0 })
	if err := f.reg.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, registry.ErrClosed) {
			t.Fatalf("Apply interrupted by Close: %v, want registry.ErrClosed", err)
		}
	case <-f.ctx.Done():
		t.Fatal("Apply still running after Close")
	}
}

func TestUnregisterUnknownServiceSendsNothing(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	f.apply(registry.Unregister(ep("prod", "never-seen", "http", "10.0.0.1", 80)))
	if n := f.fake.Calls("CreateService") + f.fake.Calls("DeregisterInstance"); n != 0 {
		t.Fatalf("unregistering from an unknown service made %d CreateService/DeregisterInstance calls", n)
	}
}

// TestServiceResolvedOncePerBatch: a batch looks each service up (or creates it)
// once, not once per write — also when the lookup fails.
func TestServiceResolvedOncePerBatch(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	batch := func(service string) []registry.Op {
		var ops []registry.Op
		for i := range 50 {
			ops = append(ops, registry.Register(ep("prod", service, "http", fmt.Sprintf("10.0.0.%d", i), 80)))
		}
		return ops
	}
	f.fake.Throttle(1 << 30)
	err := f.reg.Apply(f.ctx, batch("web"))
	var ae *registry.ApplyError
	if !errors.As(err, &ae) || len(ae.Failed) != 50 || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Apply with Cloud Map throttling everything: %v, want an ApplyError for all 50 matching ErrUnavailable", err)
	}
	if n := f.fake.Calls("ListServices"); n > 5 {
		t.Fatalf("one failing service lookup became %d ListServices calls (the SDK makes at most 5 attempts)", n)
	}
	f.fake.Throttle(0)
	f.apply(batch("web")...)
	if n := f.fake.Calls("CreateService"); n != 1 {
		t.Fatalf("a batch of 50 writes to a new service made %d CreateService calls, want 1", n)
	}
	if got := f.list(endpoint.Filter{Service: "web"}); len(got) != 50 {
		t.Fatalf("List = %d endpoints, want 50", len(got))
	}
}
