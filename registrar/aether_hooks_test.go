package registrar

import (
	"context"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// Before the registrar's first full read its snapshot is empty, so an Aether
// UnregisterEndpoint would find nothing to remove and answer OK, leaving the
// endpoint registered for good: it is Unavailable until the registrar is ready,
// and works once it is.
func TestAetherUnregisterBeforeReady(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	ctx := testCtx(t)
	if err := mem.Apply(ctx, []registry.Op{{Kind: registry.OpRegister, Endpoint: ep("east", "web", "10.0.0.1", 80)}}); err != nil {
		t.Fatal(err)
	}
	f := &faulty{Registry: pollOnly{mem}}
	f.failList.Store(true)
	s, err := NewServer(ServerConfig{Registrar: Config{Cluster: "east", Backend: f, SyncInterval: 20 * time.Millisecond, BatchInterval: 10 * time.Millisecond},
		Listen: "127.0.0.1:0", HealthListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := aetherregistrarv1.NewRegistrarServiceClient(conn)
	req := &aetherregistrarv1.UnregisterEndpointRequest{ServiceName: "web", Ips: []string{"10.0.0.1"}}
	if _, err := c.UnregisterEndpoint(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("UnregisterEndpoint before the first sync: %v, want Unavailable", err)
	}
	f.failList.Store(false)
	waitReady(t, s.Registrar())
	if _, err := c.UnregisterEndpoint(ctx, req); err != nil {
		t.Fatalf("UnregisterEndpoint once ready: %v", err)
	}
	eventually(t, "the endpoint removed from the backend", func() bool {
		got, err := mem.List(ctx, endpoint.Filter{})
		return err == nil && len(got) == 0
	})
}

// The catalog a resumed Aether watch is sent is the registrar's at the replay's
// version: the current counts with the ring's events since undone. Tokens taken
// between runs of registrations, updates, refreshes and removals of several
// services (and of a protocol Aether cannot see) each read back the catalog of
// their moment.
func TestAetherCatalogAtVersion(t *testing.T) {
	ts := startServer(t, Config{History: 64, ProgressInterval: 5 * time.Millisecond, BatchInterval: 5 * time.Millisecond})
	r := ts.Registrar()
	h := aetherHooks{r: r}
	ctx := testCtx(t)
	http := func(p string) bool { return p == "http" }
	tcp := func(e endpoint.Endpoint) endpoint.Endpoint { e.Protocol = "tcp"; return e }
	weighted := func(e endpoint.Endpoint, w int) endpoint.Endpoint { e.Weight = w; return e }
	write := func(ops ...registry.Op) {
		t.Helper()
		if _, err := r.accept(ctx, ops); err != nil {
			t.Fatal(err)
		}
	}
	reg, unreg := registry.Register, func(e endpoint.Endpoint) registry.Op { return registry.Unregister(e) }
	// now is the current token and the catalog counted from the snapshot.
	type moment struct {
		version string
		counts  map[string]int
	}
	now := func() moment {
		eps, v := h.Endpoints(endpoint.Filter{Protocol: "http"})
		counts := map[string]int{}
		for _, e := range eps {
			counts[e.Service]++
		}
		return moment{v, counts}
	}
	var moments []moment

	moments = append(moments, now()) // empty
	write(reg(ep("east", "web", "10.0.0.1", 80)), reg(ep("east", "web", "10.0.0.2", 80)), reg(ep("east", "api", "10.0.0.3", 80)))
	write(reg(tcp(ep("east", "db", "10.0.0.9", 5432))))
	moments = append(moments, now())
	write(unreg(ep("east", "web", "10.0.0.1", 80)))
	write(reg(ep("east", "cache", "10.0.0.4", 80)), reg(weighted(ep("east", "api", "10.0.0.3", 80), 5)))
	write(reg(ep("east", "api", "10.0.0.3", 80))) // back to the first weight
	write(reg(tcp(ep("east", "web", "10.0.0.1", 9000))))
	time.Sleep(50 * time.Millisecond) // PROGRESS events in the ring
	moments = append(moments, now())
	write(unreg(ep("east", "api", "10.0.0.3", 80)), reg(ep("east", "api", "10.0.0.5", 80)))
	write(unreg(ep("east", "cache", "10.0.0.4", 80)), unreg(ep("east", "web", "10.0.0.2", 80)))
	moments = append(moments, now())
	write(reg(ep("east", "cache", "10.0.0.4", 80)), unreg(tcp(ep("east", "db", "10.0.0.9", 5432))))
	write(reg(ep("west", "cache", "10.0.0.4", 80))) // another cluster's, counted too
	moments = append(moments, now())

	for i, m := range moments {
		got, ok := h.Catalog(m.version, http)
		if !ok || !maps.Equal(got, m.counts) {
			t.Errorf("moment %d (%s): catalog %v (ok %v), want %v", i, m.version, got, ok, m.counts)
		}
	}
	// Not this replica's tokens, and one older than the ring.
	v, _ := token.Parse(moments[1].version)
	v.Epoch++
	for _, bad := range []string{"", "garbage", v.String()} {
		if got, ok := h.Catalog(bad, http); ok {
			t.Errorf("catalog at %q: %v, want none", bad, got)
		}
	}
	for i := range 70 {
		write(reg(weighted(ep("east", "web", "10.0.1.1", 80), i+1)))
	}
	if got, ok := h.Catalog(moments[0].version, http); ok {
		t.Errorf("catalog at a version the ring no longer covers: %v, want none", got)
	}
}
