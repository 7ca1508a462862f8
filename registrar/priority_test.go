package registrar

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// TestRegisterWithoutPriority: over gRPC an endpoint without a priority gets the
// default (1), as from the CLI and the manifest; proto3 cannot tell "unset" from 0.
func TestRegisterWithoutPriority(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := testCtx(t)
	p := &registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 8080}
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{p}}); err != nil {
		t.Fatalf("register without a priority: %v", err)
	}
	resp, err := ts.client.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEndpoints()) != 1 || resp.GetEndpoints()[0].GetPriority() != 1 {
		t.Fatalf("stored %v, want one endpoint with priority 1", resp.GetEndpoints())
	}
	// A priority out of range is still refused.
	bad := &registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.3", Port: 8080, Priority: 256}
	_, err = ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{bad}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("priority 256: %v, want InvalidArgument", err)
	}
}
