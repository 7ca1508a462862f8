package access

import (
	"fmt"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// Role is what a caller may do; a stronger role includes the weaker ones.
type Role uint8

const (
	// NoRole is a caller known to no binding.
	NoRole Role = iota
	// Viewer lists nodes, links, routes and segments, and asks nodes for their state.
	Viewer
	// Admin also changes the topology and the routes: every mutating method.
	Admin
)

func (r Role) String() string {
	switch r {
	case Viewer:
		return config.RoleViewer
	case Admin:
		return config.RoleAdmin
	}
	return "none"
}

// ParseRole maps a role's name to the Role.
func ParseRole(s string) (Role, error) {
	switch s {
	case config.RoleViewer:
		return Viewer, nil
	case config.RoleAdmin:
		return Admin, nil
	}
	return NoRole, fmt.Errorf("unknown role %q (want %s or %s)", s, config.RoleViewer, config.RoleAdmin)
}

// MethodRoles is the role each northbound method needs. A method missing here is
// refused to everyone (and a test fails), so a new RPC is never left open by
// accident. Admin methods are the mutations, and each successful one is audited.
var MethodRoles = map[string]Role{
	controlplanev1.ControlPlaneService_ListNodes_FullMethodName:             Viewer,
	controlplanev1.ControlPlaneService_ListLinks_FullMethodName:             Viewer,
	controlplanev1.ControlPlaneService_ListRoutes_FullMethodName:            Viewer,
	controlplanev1.ControlPlaneService_ListSegments_FullMethodName:          Viewer,
	controlplanev1.ControlPlaneService_ListNodeConnections_FullMethodName:   Viewer,
	controlplanev1.ControlPlaneService_ListNodeSubscriptions_FullMethodName: Viewer,
	controlplanev1.ControlPlaneService_ListGroups_FullMethodName:            Viewer,
	controlplanev1.ControlPlaneService_AddSegment_FullMethodName:            Admin,
	controlplanev1.ControlPlaneService_RemoveSegment_FullMethodName:         Admin,
	controlplanev1.ControlPlaneService_AddTopologyLink_FullMethodName:       Admin,
	controlplanev1.ControlPlaneService_RemoveTopologyLink_FullMethodName:    Admin,
	controlplanev1.ControlPlaneService_AddRoute_FullMethodName:              Admin,
	controlplanev1.ControlPlaneService_DeleteRoute_FullMethodName:           Admin,
	controlplanev1.ControlPlaneService_AddGroupSecret_FullMethodName:        Admin,
	controlplanev1.ControlPlaneService_RotateGroupSecret_FullMethodName:     Admin,
	controlplanev1.ControlPlaneService_RemoveGroupSecret_FullMethodName:     Admin,
}

// openMethods need no credentials: the gRPC health check, which kubelets and load
// balancers call without any, and which tells no more than whether the port serves.
var openMethods = map[string]bool{
	healthpb.Health_Check_FullMethodName: true,
	healthpb.Health_Watch_FullMethodName: true,
}

// introspectionRoles are the standard services beside the API: server reflection
// describes every method and message, so it needs what listing needs.
var introspectionRoles = map[string]Role{
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      Viewer,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: Viewer,
}
