package client_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// ListAll decodes the registrar's response itself; what it returns must be what the
// generated messages say, field for field, for every kind of endpoint.
func TestListAllReadsWhatTheGeneratedClientReads(t *testing.T) {
	b := memory.New()
	defer b.Close()
	annotated := ep("east", "web", "10.0.0.1", 80)
	annotated.Annotations = map[string]string{"team": "blue", "zone": "a"}
	annotated.Node, annotated.Priority, annotated.Weight = "n1", 3, 7
	annotated.TTL = endpoint.TTL(90 * time.Second)
	forever := ep("west", "db", "2001:db8::1", 5432)
	forever.TTL = endpoint.Never
	plain := ep("east", "web", "10.0.0.2", 81)
	apply(t, b, registry.Register(annotated), registry.Register(forever), registry.Register(plain))
	reg := runRegistrar(t, registrar.Config{Cluster: "east", Backend: b})
	h := host(t, reg, "127.0.0.1:0")
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx := testCtx(t)

	for _, f := range []endpoint.Filter{{}, {Service: "web"}, {Cluster: "west"}} {
		got, version, err := client.ListAll(ctx, conn, f)
		if err != nil {
			t.Fatalf("ListAll(%+v): %v", f, err)
		}
		resp, err := registrarv1.NewRegistrarClient(conn).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{
			Cluster: f.Cluster, Service: f.Service, Protocol: f.Protocol, Address: f.Address})
		if err != nil {
			t.Fatal(err)
		}
		if version == "" || version != resp.GetVersion() {
			t.Fatalf("ListAll(%+v) version %q, the generated client read %q", f, version, resp.GetVersion())
		}
		if len(got) != len(resp.GetEndpoints()) {
			t.Fatalf("ListAll(%+v) returned %d endpoints, the generated client read %d", f, len(got), len(resp.GetEndpoints()))
		}
		for i, p := range resp.GetEndpoints() {
			want, err := endpoint.FromProtoUnchecked(p)
			if err != nil {
				t.Fatal(err)
			}
			if !endpoint.Equal(got[i], want) {
				t.Fatalf("ListAll(%+v)[%d] = %+v, the generated client read %+v", f, i, got[i], want)
			}
		}
	}
	all, _, err := client.ListAll(ctx, conn, endpoint.Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("ListAll of everything = %d endpoints, %v; want 3", len(all), err)
	}
}
