package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// listServices asks a server's reflection service which services it serves.
func listServices(ctx context.Context, cc *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.CloseSend() }()
	resp, err := ask(stream, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// ask sends req and reads the answer. A Send that finds the stream already ended by
// the server (a rejected call) returns io.EOF; the status is what Recv then returns.
func ask(stream reflectionpb.ServerReflection_ServerReflectionInfoClient, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.Recv()
}

// describes asks reflection for the file that defines symbol.
func describes(ctx context.Context, cc *grpc.ClientConn, symbol string) error {
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stream.CloseSend() }()
	resp, err := ask(stream, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	})
	if err != nil {
		return err
	}
	if e := resp.GetErrorResponse(); e != nil {
		return fmt.Errorf("reflection: %s", e.GetErrorMessage())
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		return fmt.Errorf("reflection sent no descriptor for %s", symbol)
	}
	return nil
}

func checkHealth(ctx context.Context, t *testing.T, cc *grpc.ClientConn, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check of %q: %v", service, err)
	}
	if resp.GetStatus() != want {
		t.Fatalf("health of %q is %s, want %s", service, resp.GetStatus(), want)
	}
}

// TestIntrospection: both gRPC ports carry the standard health service and server
// reflection, so grpcurl and grpc_health_probe work against them; health says
// NOT_SERVING once the server stops taking work.
func TestIntrospection(t *testing.T) {
	srv, stop := run(t, server.Options{Config: testConfig(t, star)})
	ctx := deadline(t)
	ports := []struct {
		name, addr, service string
	}{
		{"northbound", srv.NorthboundAddr(), controlplanev1.ControlPlaneService_ServiceDesc.ServiceName},
		{"southbound", srv.SouthboundAddr(), controllerv1.ControllerService_ServiceDesc.ServiceName},
	}
	var conns []*grpc.ClientConn
	for _, p := range ports {
		cc := dial(t, p.addr)
		conns = append(conns, cc)
		checkHealth(ctx, t, cc, "", healthpb.HealthCheckResponse_SERVING)
		checkHealth(ctx, t, cc, p.service, healthpb.HealthCheckResponse_SERVING)
		names, err := listServices(ctx, cc)
		if err != nil {
			t.Fatalf("%s: reflection: %v", p.name, err)
		}
		for _, want := range []string{p.service, healthpb.Health_ServiceDesc.ServiceName} {
			if !slices.Contains(names, want) {
				t.Errorf("%s: reflection lists %v, not %s", p.name, names, want)
			}
		}
		if err := describes(ctx, cc, p.service); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
	// A Watch sees the status change as the server shuts down.
	watch, err := healthpb.NewHealthClient(conns[1]).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first health update: %v, %v", first, err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	next, err := watch.Recv()
	if err == nil && next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health during shutdown: %s, want NOT_SERVING", next.GetStatus())
	}
	// err != nil: the stream ended with the server, which a probe also reads as down.
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// TestIntrospectionWithRoles: with northbound roles enforced, the health check stays
// open (probes carry no credentials) and reflection needs a viewer, like listing.
func TestIntrospectionWithRoles(t *testing.T) {
	tok := access.Generate()
	line, err := access.HashLine("viewer", "ops", tok)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := run(t, server.Options{Config: testConfig(t, "northbound:\n  authorization: {token_file: "+tokens+"}\n"+star)})
	ctx := deadline(t)
	cc := dial(t, srv.NorthboundAddr())
	checkHealth(ctx, t, cc, "", healthpb.HealthCheckResponse_SERVING)
	if _, err := listServices(ctx, cc); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reflection without a token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	names, err := listServices(authed, cc)
	if err != nil || !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "ControlPlaneService") }) {
		t.Fatalf("reflection as a viewer: %v, %v", names, err)
	}
}

// TestRuntimeMetrics: /metrics carries the Go runtime's and the process's series.
func TestRuntimeMetrics(t *testing.T) {
	srv, _ := run(t, server.Options{Config: testConfig(t, star), MetricsListen: "127.0.0.1:0"})
	code, body := get(t, "http://"+srv.MetricsAddr()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{"\ngo_goroutines ", "\ngo_memstats_heap_alloc_bytes ", "\nprocess_open_fds ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", strings.TrimSpace(want))
		}
	}
}
