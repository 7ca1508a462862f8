package registrar

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/internal/wirecheck"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
)

// The registrar's hand-written encoder of events and listings, and its decoder of
// watch requests, agree with the .proto: every field number they use is the field
// they take it for. The watch request is decoded whole, so a field added to it
// fails here until the decoder reads it.
func TestWireFieldsMatchTheProto(t *testing.T) {
	type f = wirecheck.Field
	wirecheck.Check(t, &registrarv1.EndpointEvent{}, map[protowire.Number]wirecheck.Field{
		wire.EventFieldType:       f{Name: "type", Kind: protoreflect.EnumKind},
		wire.EventFieldEndpoint:   f{Name: "endpoint", Kind: protoreflect.MessageKind},
		wire.EventFieldVersion:    f{Name: "version", Kind: protoreflect.StringKind},
		wire.EventFieldEndpoints:  f{Name: "endpoints", Kind: protoreflect.MessageKind},
		wire.EventFieldResumed:    f{Name: "resumed", Kind: protoreflect.BoolKind},
		wire.EventFieldPersisted:  f{Name: "persisted", Kind: protoreflect.StringKind},
		wire.EventFieldScopeID:    f{Name: "scope_id", Kind: protoreflect.Uint64Kind},
		wire.EventFieldEvents:     f{Name: "events", Kind: protoreflect.MessageKind},
		wire.EventFieldCompressed: f{Name: "compressed", Kind: protoreflect.BytesKind},
		wire.EventFieldTrace:      f{Name: "traceparent", Kind: protoreflect.StringKind},
	}, true)
	wirecheck.Check(t, &registrarv1.WatchEndpointsRequest{}, map[protowire.Number]wirecheck.Field{
		fieldReqCluster:     f{Name: "cluster_name", Kind: protoreflect.StringKind},
		fieldReqNode:        f{Name: "node_name", Kind: protoreflect.StringKind},
		fieldReqLastVersion: f{Name: "last_version", Kind: protoreflect.StringKind},
		fieldReqServices:    f{Name: "services", Kind: protoreflect.StringKind},
		fieldReqScopeID:     f{Name: "scope_id", Kind: protoreflect.Uint64Kind},
		fieldReqAll:         f{Name: "all_services", Kind: protoreflect.BoolKind},
		fieldReqBatches:     f{Name: "accept_batches", Kind: protoreflect.BoolKind},
		fieldReqCompressed:  f{Name: "accept_compressed", Kind: protoreflect.BoolKind},
	}, true)
	wirecheck.Check(t, &registryv1.Endpoint{}, map[protowire.Number]wirecheck.Field{
		view.EpInstanceID: f{Name: "instance_id", Kind: protoreflect.StringKind}, // left out of compressed parts
	}, false)
	wirecheck.Check(t, &registrarv1.ListAllEndpointsResponse{}, map[protowire.Number]wirecheck.Field{
		view.FieldListEndpoints: f{Name: "endpoints", Kind: protoreflect.MessageKind},
		view.FieldListVersion:   f{Name: "version", Kind: protoreflect.StringKind},
	}, true)
}
