package registrar

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// reads counts the full reads of a backend: Lists, and watches (whose initial
// state is a full read).
type reads struct {
	registry.Registry
	lists, watches atomic.Int64
}

func (r *reads) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	r.lists.Add(1)
	return r.Registry.List(ctx, f)
}

func (r *reads) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	r.watches.Add(1)
	return r.Registry.(registry.Watcher).Watch(ctx, f)
}

// At startup the backend is read once: with a change feed, by the feed's initial
// state (no poll alongside it); READY comes after that read, with the snapshot
// already built, plain and compressed, for the watchers that arrive next.
func TestStartupReadsTheBackendOnce(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	for i := range 100 {
		if err := mem.Apply(testCtx(t), []registry.Op{registry.Register(ep("east", "web", fmt.Sprintf("10.0.0.%d", i+1), 80))}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("with a change feed", func(t *testing.T) {
		b := &reads{Registry: mem}
		ts := startServer(t, Config{Backend: b, SyncInterval: time.Hour})
		if l, w := b.lists.Load(), b.watches.Load(); l != 0 || w != 1 {
			t.Fatalf("ready after %d Lists and %d watches, want the watch's read alone", l, w)
		}
		if !ts.Registrar().view.Prepared() {
			t.Fatal("ready before the snapshot was built")
		}
	})
	t.Run("polling only", func(t *testing.T) {
		b := &reads{Registry: mem}
		startServer(t, Config{Backend: pollOnly{b}, SyncInterval: time.Hour})
		if l := b.lists.Load(); l != 1 {
			t.Fatalf("ready after %d Lists, want 1", l)
		}
	})
}

// ListAllEndpoints answers from a listing built once per version: the same
// endpoints, sorted, as a marshalled response would carry; filters still apply.
func TestListAllEndpointsFromTheCachedListing(t *testing.T) {
	ts := startServer(t, Config{AlsoAccept: []string{"*"}, BatchInterval: 5 * time.Millisecond})
	var want []endpoint.Endpoint
	for i := range 50 {
		e := ep([]string{"east", "west"}[i%2], []string{"web", "db"}[i%3%2], fmt.Sprintf("10.0.%d.%d", i%7, i), 80+i)
		e.Annotations = map[string]string{"i": fmt.Sprint(i)}
		want = append(want, e)
	}
	register(t, ts, want...)
	endpoint.Sort(want)
	list := func(req *registrarv1.ListAllEndpointsRequest) []endpoint.Endpoint {
		t.Helper()
		resp, err := ts.client.ListAllEndpoints(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetVersion() == "" {
			t.Fatal("response without a version")
		}
		var out []endpoint.Endpoint
		for _, p := range resp.GetEndpoints() {
			e, err := endpoint.FromProto(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	for range 2 { // built, then served from the cache
		if got := list(&registrarv1.ListAllEndpointsRequest{}); !slices.EqualFunc(got, want, endpoint.Equal) {
			t.Fatalf("ListAllEndpoints = %v\nwant %v", got, want)
		}
	}
	var west []endpoint.Endpoint
	for _, e := range want {
		if e.Cluster == "west" && e.Service == "db" {
			west = append(west, e)
		}
	}
	if got := list(&registrarv1.ListAllEndpointsRequest{Cluster: "west", Service: "db"}); !slices.EqualFunc(got, west, endpoint.Equal) {
		t.Fatalf("filtered ListAllEndpoints = %v\nwant %v", got, west)
	}
	// A change makes a new listing.
	gone := want[0]
	unregister(t, ts, gone)
	if got := list(&registrarv1.ListAllEndpointsRequest{Cluster: "*"}); len(got) != len(want)-1 || slices.ContainsFunc(got, func(e endpoint.Endpoint) bool { return e.Key() == gone.Key() }) {
		t.Fatalf("after removing %s ListAllEndpoints holds %d endpoints", gone.Key(), len(got))
	}
	// The wire form is exactly what marshalling the response would produce.
	resp := listResponse(ts.Registrar().view.ListAll(endpoint.Filter{}))
	raw, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var decoded registrarv1.ListAllEndpointsResponse
	if err := proto.Unmarshal(raw, &decoded); err != nil {
		t.Fatal(err)
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(&decoded)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(raw) || len(decoded.GetEndpoints()) != len(want)-1 {
		t.Fatalf("the listing is %d bytes, a marshalled response %d; %d endpoints", len(raw), len(again), len(decoded.GetEndpoints()))
	}
}
