package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// servedServices are the names the health service reports on, beside "" (the whole
// server): what a load balancer or a kubelet gRPC probe asks for.
var servedServices = []string{
	controlplanev1.ControlPlaneService_ServiceDesc.ServiceName,
	controllerv1.ControllerService_ServiceDesc.ServiceName,
}

// newHealth reports NOT_SERVING until Run serves, so a probe that reaches a port
// bound by New but not yet served is told to wait.
func newHealth() *health.Server {
	h := health.NewServer()
	setHealth(h, healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

func setHealth(h *health.Server, st healthpb.HealthCheckResponse_ServingStatus) {
	h.SetServingStatus("", st)
	for _, name := range servedServices {
		h.SetServingStatus(name, st)
	}
}

// introspect adds the gRPC health service and server reflection to a server, so
// grpcurl, grpc_health_probe and load balancers can inspect both ports without our
// .proto files.
func introspect(gs *grpc.Server, h *health.Server) {
	healthpb.RegisterHealthServer(gs, h)
	reflection.Register(gs)
}
