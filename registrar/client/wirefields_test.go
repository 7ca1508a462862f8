package client

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wirecheck"
)

// The client's hand-written decoder of endpoints agrees with the .proto, field by
// field, and knows every field of Endpoint: one added to the .proto fails here
// until the decoder reads it (it would otherwise be dropped without a word).
func TestWireFieldsMatchTheProto(t *testing.T) {
	type f = wirecheck.Field
	wirecheck.Check(t, &registryv1.Endpoint{}, map[protowire.Number]wirecheck.Field{
		epCluster:     f{Name: "cluster", Kind: protoreflect.StringKind},
		epService:     f{Name: "service", Kind: protoreflect.StringKind},
		epProtocol:    f{Name: "protocol", Kind: protoreflect.StringKind},
		epAddress:     f{Name: "address", Kind: protoreflect.StringKind},
		epPort:        f{Name: "port", Kind: protoreflect.Uint32Kind},
		epNode:        f{Name: "node", Kind: protoreflect.StringKind},
		epPriority:    f{Name: "priority", Kind: protoreflect.Uint32Kind},
		epWeight:      f{Name: "weight", Kind: protoreflect.Uint32Kind},
		epAnnotations: f{Name: "annotations", Kind: protoreflect.MessageKind},
		epTTL:         f{Name: "ttl", Kind: protoreflect.MessageKind},
		epTTLNever:    f{Name: "ttl_never", Kind: protoreflect.BoolKind},
		epInstanceID:  f{Name: "instance_id", Kind: protoreflect.StringKind},
		epRegion:      f{Name: "region", Kind: protoreflect.StringKind},
		epZone:        f{Name: "zone", Kind: protoreflect.StringKind},
		epHealth:      f{Name: "health", Kind: protoreflect.EnumKind},
	}, true)
	wirecheck.Check(t, &registrarv1.ListAllEndpointsResponse{}, map[protowire.Number]wirecheck.Field{
		listEndpoints: f{Name: "endpoints", Kind: protoreflect.MessageKind},
		listVersion:   f{Name: "version", Kind: protoreflect.StringKind},
	}, true)
}
