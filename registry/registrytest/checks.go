package registrytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

var checks = []check{
	{"RegisterList", checkRegisterList},
	{"FieldsRoundTrip", checkFieldsRoundTrip},
	{"Filters", checkFilters},
	{"SortOrder", checkSortOrder},
	{"ReregisterUpdatesInPlace", checkReregister},
	{"Unregister", checkUnregister},
	{"UnregisterMissing", checkUnregisterMissing},
	{"BatchNetsOut", checkBatchNetsOut},
	{"LargeBatch", checkLargeBatch},
	{"InvalidRejected", checkInvalidRejected},
	{"TTLExpiry", checkTTLExpiry},
	{"ConcurrentWriters", checkConcurrentWriters},
	{"WatchInitialState", checkWatchInitial},
	{"WatchChangesInOrder", checkWatchChanges},
	{"WatchExpiry", checkWatchExpiry},
	{"WatchRereadSendsDifferences", checkWatchReread},
	{"CloseIdempotent", checkClose},
	{"InvalidFilterRejected", checkInvalidFilter},
	{"WatchAfterClose", checkWatchAfterClose},
	{"WatchContextCancel", checkWatchContextCancel},
	{"CloseWaitsForCalls", checkCloseWaitsForCalls},
	{"ReregisterExpired", checkReregisterExpired},
	{"LocalityRoundTrip", checkLocalityRoundTrip},
	{"WatchHealthChange", checkWatchHealthChange},
	{"HoldOutlivesTTL", checkHold},
}

func checkRegisterList(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{}); err != nil {
		return fmt.Errorf("new registry not empty: %w", err)
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	if err := apply(ctx, r, registry.Register(a), registry.Register(b)); err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{}, a, b)
}

func checkFieldsRoundTrip(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	full := endpoint.Endpoint{
		Cluster: "prod-eu", Service: "api_gw", Protocol: "grpc", Address: "2001:db8::7", Port: 9443,
		Node: "node-7.example", Priority: 200, Weight: 30,
		Annotations: map[string]string{"team": "edge", "prometheus.io/scrape": "true", "note": "spaces and ünïcode"},
		TTL:         endpoint.Never,
	}
	bare := ep("prod", "db", "tcp", "10.1.0.1", 0)
	if err := apply(ctx, r, registry.Register(full), registry.Register(bare)); err != nil {
		return err
	}
	got, err := list(ctx, r, endpoint.Filter{})
	if err != nil {
		return err
	}
	if len(got) != 2 {
		return fmt.Errorf("List returned %d endpoints, want 2", len(got))
	}
	for i, want := range []endpoint.Endpoint{bare, full} {
		if !endpoint.Equal(got[i], want) {
			return fmt.Errorf("round trip changed the endpoint:\n got %+v\nwant %+v", got[i], want)
		}
	}
	return nil
}

func checkFilters(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("east", "web", "http", "10.0.0.1", 80)
	b := ep("east", "web", "grpc", "10.0.0.1", 9090)
	c := ep("west", "web", "http", "10.0.0.2", 80)
	d := ep("west", "db", "tcp", "10.0.0.3", 5432)
	e := ep("west", "db", "tcp", "2001:db8::3", 5432)
	if err := apply(ctx, r, registry.Register(a), registry.Register(b), registry.Register(c), registry.Register(d), registry.Register(e)); err != nil {
		return err
	}
	cases := []struct {
		f    endpoint.Filter
		want []endpoint.Endpoint
	}{
		{endpoint.Filter{}, []endpoint.Endpoint{a, b, c, d, e}},
		{endpoint.Filter{Cluster: "*", Protocol: "*", Service: "*", Address: "*"}, []endpoint.Endpoint{a, b, c, d, e}},
		{endpoint.Filter{Cluster: "east"}, []endpoint.Endpoint{a, b}},
		{endpoint.Filter{Protocol: "http"}, []endpoint.Endpoint{a, c}},
		{endpoint.Filter{Service: "db"}, []endpoint.Endpoint{d, e}},
		{endpoint.Filter{Address: "10.0.0.1"}, []endpoint.Endpoint{a, b}},
		{endpoint.Filter{Address: "2001:DB8:0::3"}, []endpoint.Endpoint{e}},
		{endpoint.Filter{Cluster: "west", Service: "web"}, []endpoint.Endpoint{c}},
		{endpoint.Filter{Cluster: "east", Protocol: "grpc", Service: "web"}, []endpoint.Endpoint{b}},
		{endpoint.Filter{Cluster: "north"}, nil},
		{endpoint.Filter{Service: "web", Address: "10.0.0.3"}, nil},
	}
	for _, c := range cases {
		if err := expectKeys(ctx, r, c.f, c.want...); err != nil {
			return err
		}
	}
	return nil
}

func checkSortOrder(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	// Written out of order; numeric IP order puts 10.0.0.2 before 10.0.0.10 and
	// every IPv4 address before IPv6.
	want := []endpoint.Endpoint{
		ep("c", "s", "p", "9.0.0.1", 80),
		ep("c", "s", "p", "10.0.0.2", 80),
		ep("c", "s", "p", "10.0.0.2", 443),
		ep("c", "s", "p", "10.0.0.10", 80),
		ep("c", "s", "p", "::1", 80),
		ep("c", "s", "p", "2001:db8::1", 80),
	}
	var ops []registry.Op
	for _, i := range []int{4, 3, 5, 1, 0, 2} {
		ops = append(ops, registry.Register(want[i]))
	}
	if err := apply(ctx, r, ops...); err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{}, want...)
}

func checkReregister(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	if err := apply(ctx, r, registry.Register(a)); err != nil {
		return err
	}
	a2 := a.Clone()
	a2.Priority, a2.Weight, a2.Node = 7, 3, "node-b"
	a2.Annotations = map[string]string{"version": "2"}
	if err := apply(ctx, r, registry.Register(a2)); err != nil {
		return err
	}
	got, err := list(ctx, r, endpoint.Filter{})
	if err != nil {
		return err
	}
	if len(got) != 1 || !endpoint.Equal(got[0], a2) {
		return fmt.Errorf("after re-register List = %+v, want one entry %+v", got, a2)
	}
	return nil
}

func checkUnregister(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	if err := apply(ctx, r, registry.Register(a), registry.Register(b)); err != nil {
		return err
	}
	// Only the key matters for an unregister.
	keyOnly := endpoint.Endpoint{Cluster: a.Cluster, Service: a.Service, Protocol: a.Protocol, Address: a.Address, Port: a.Port}
	if err := apply(ctx, r, registry.Unregister(keyOnly)); err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{}, b)
}

func checkUnregisterMissing(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	if err := apply(ctx, r, registry.Unregister(a)); err != nil {
		return fmt.Errorf("unregistering a missing key failed: %w", err)
	}
	return expectKeys(ctx, r, endpoint.Filter{})
}

func checkBatchNetsOut(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	c := ep("prod", "web", "http", "10.0.0.3", 80)
	if err := apply(ctx, r, registry.Register(c)); err != nil {
		return err
	}
	c2 := c.Clone()
	c2.Priority = 9
	b2 := b.Clone()
	b2.Priority = 5
	// a: register then unregister → absent. b: unregister, register, re-register →
	// present with the last fields. c (stored): update then unregister → absent.
	if err := apply(ctx, r,
		registry.Register(a), registry.Unregister(b), registry.Register(c2), registry.Register(b),
		registry.Unregister(a), registry.Unregister(c), registry.Register(b2)); err != nil {
		return err
	}
	got, err := list(ctx, r, endpoint.Filter{})
	if err != nil {
		return err
	}
	if len(got) != 1 || !endpoint.Equal(got[0], b2) {
		return fmt.Errorf("after a netting batch List = %s, want only %s with priority 5", fmtKeys(keys(got)), b2.Key())
	}
	return nil
}

func checkLargeBatch(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	// Larger than etcd's default 128 ops per Txn and DynamoDB's 100 items per
	// transaction: backends must split, not fail.
	const n = 300
	ops := make([]registry.Op, n)
	want := make([]endpoint.Endpoint, n)
	for i := range n {
		want[i] = ep("prod", "bulk", "http", fmt.Sprintf("10.2.%d.%d", i/256, i%256), 8080)
		ops[i] = registry.Register(want[i])
	}
	if err := apply(ctx, r, ops...); err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{Service: "bulk"}, want...); err != nil {
		return err
	}
	for i := range ops {
		ops[i] = registry.Unregister(want[i])
	}
	if err := apply(ctx, r, ops...); err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{})
}

func checkInvalidRejected(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	good := ep("prod", "web", "http", "10.0.0.1", 80)
	stored := ep("prod", "web", "http", "10.0.0.9", 80)
	if err := apply(ctx, r, registry.Register(stored)); err != nil {
		return err
	}
	bad := map[string]endpoint.Endpoint{}
	for field, mutate := range map[string]func(*endpoint.Endpoint){
		"service":     func(e *endpoint.Endpoint) { e.Service = "9web" },
		"cluster":     func(e *endpoint.Endpoint) { e.Cluster = "" },
		"protocol":    func(e *endpoint.Endpoint) { e.Protocol = "ht.tp" },
		"address":     func(e *endpoint.Endpoint) { e.Address = "10.0.0.300" },
		"port":        func(e *endpoint.Endpoint) { e.Port = 70000 },
		"priority":    func(e *endpoint.Endpoint) { e.Priority = 0 },
		"annotations": func(e *endpoint.Endpoint) { e.Annotations = map[string]string{"bad key": "v"} },
		"ttl":         func(e *endpoint.Endpoint) { e.TTL = endpoint.TTL(10 * time.Millisecond) },
	} {
		e := ep("prod", "web", "http", "10.0.0.2", 80)
		mutate(&e)
		bad[field] = e
	}
	for field, e := range bad {
		// The valid op comes first: a backend that writes as it validates would
		// store it.
		err := r.Apply(ctx, []registry.Op{registry.Register(good), registry.Register(e), registry.Unregister(stored)})
		if err == nil {
			return fmt.Errorf("Apply with an invalid %s was accepted", field)
		}
		if !errors.Is(err, endpoint.ErrInvalid) {
			return fmt.Errorf("Apply with an invalid %s: error %q does not match endpoint.ErrInvalid", field, err)
		}
		if !strings.Contains(err.Error(), field) {
			return fmt.Errorf("Apply with an invalid %s: error %q does not name the field", field, err)
		}
	}
	if err := expectKeys(ctx, r, endpoint.Filter{}, stored); err != nil {
		return fmt.Errorf("a rejected batch changed what is stored: %w", err)
	}
	return nil
}

func checkTTLExpiry(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	short := ep("prod", "web", "http", "10.0.0.1", 80)
	short.TTL = endpoint.TTL(h.opts.TTL)
	never := ep("prod", "web", "http", "10.0.0.2", 80)
	never.TTL = endpoint.Never
	unset := ep("prod", "web", "http", "10.0.0.3", 80)
	if err := apply(ctx, r, registry.Register(short), registry.Register(never), registry.Register(unset)); err != nil {
		return err
	}
	if err := expectKeys(ctx, r, endpoint.Filter{}, short, never, unset); err != nil {
		return fmt.Errorf("before expiry: %w", err)
	}
	err = eventually(ctx, h.opts.TTL+h.opts.Wait, "entry with TTL "+h.opts.TTL.String()+" disappears from List", func() (bool, error) {
		got, err := list(ctx, r, endpoint.Filter{})
		if err != nil {
			return false, err
		}
		return len(got) == 2, nil
	})
	if err != nil {
		return err
	}
	return expectKeys(ctx, r, endpoint.Filter{}, never, unset)
}

func checkConcurrentWriters(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := ep("prod", "web", "http", fmt.Sprintf("10.3.%d.%d", w, i), 80)
				if err := r.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
					errs <- err
					return
				}
				// Every writer also removes its odd entries, racing the others.
				if i%2 == 1 {
					if err := r.Apply(ctx, []registry.Op{registry.Unregister(e)}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return fmt.Errorf("concurrent Apply: %w", err)
	}
	got, err := list(ctx, r, endpoint.Filter{})
	if err != nil {
		return err
	}
	if want := writers * ((each + 1) / 2); len(got) != want {
		return fmt.Errorf("after concurrent writes List has %d endpoints, want %d", len(got), want)
	}
	return nil
}

func checkWatchInitial(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	other := ep("prod", "db", "tcp", "10.0.0.3", 5432)
	if err := apply(ctx, r, registry.Register(a), registry.Register(b), registry.Register(other)); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watch(wctx, r, endpoint.Filter{Service: "web"})
	if err != nil {
		return err
	}
	return expectSynced(ctx, ch, h.opts.Wait, a, b)
}

func checkWatchChanges(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watch(wctx, r, endpoint.Filter{Service: "web"})
	if err != nil {
		return err
	}
	if err := expectSynced(ctx, ch, h.opts.Wait); err != nil {
		return err
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	other := ep("prod", "db", "tcp", "10.0.0.3", 5432)
	// The non-matching write goes first: events arrive in order, so if the filter
	// leaked it, it would arrive before a's.
	if err := apply(ctx, r, registry.Register(other)); err != nil {
		return err
	}
	if err := apply(ctx, r, registry.Register(a)); err != nil {
		return err
	}
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Added, a); err != nil {
		return err
	}
	a2 := a.Clone()
	a2.Priority = 42
	if err := apply(ctx, r, registry.Register(a2)); err != nil {
		return err
	}
	ev, err := expectEvent(ctx, ch, h.opts.Wait, registry.Updated, a)
	if err != nil {
		return err
	}
	if ev.Endpoint.Priority != 42 {
		return fmt.Errorf("Updated event carries priority %d, want the new value 42", ev.Endpoint.Priority)
	}
	if err := apply(ctx, r, registry.Unregister(other), registry.Unregister(a)); err != nil {
		return err
	}
	if _, err := expectEvent(ctx, ch, h.opts.Wait, registry.Removed, a); err != nil {
		return err
	}
	return expectQuiet(ctx, ch, 200*time.Millisecond)
}

func checkWatchExpiry(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, a, err := watchShortLived(ctx, wctx, h, r)
	if err != nil {
		return err
	}
	if _, err := expectEvent(ctx, ch, h.opts.TTL+h.opts.Wait, registry.Removed, a); err != nil {
		return fmt.Errorf("expiry: %w", err)
	}
	return nil
}

func checkClose(ctx context.Context, h *harness) error {
	r, err := h.registry()
	if err != nil {
		return err
	}
	var ch <-chan registry.Event
	if _, ok := r.(registry.Watcher); ok {
		ch, err = watch(ctx, r, endpoint.Filter{})
		if err != nil && !errors.Is(err, ErrSkipped) {
			return err
		}
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("first Close: %w", err)
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("second Close: %w", err)
	}
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	if err := r.Apply(ctx, []registry.Op{registry.Register(a)}); !errors.Is(err, registry.ErrClosed) {
		return fmt.Errorf("Apply after Close = %v, want registry.ErrClosed", err)
	}
	if _, err := r.List(ctx, endpoint.Filter{}); !errors.Is(err, registry.ErrClosed) {
		return fmt.Errorf("List after Close = %v, want registry.ErrClosed", err)
	}
	if ch != nil {
		// Close ends every watch: drain until the channel closes.
		deadline := time.After(h.opts.Wait)
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return nil
				}
			case <-deadline:
				return fmt.Errorf("watch channel still open %s after Close", h.opts.Wait)
			}
		}
	}
	return nil
}

func isNoWatch(err error) bool { return errors.Is(err, registry.ErrNoWatch) }
