package wire

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// EventType's values are the .proto's: every value of the generated enum has its
// twin here, and no twin names another number.
func TestEventTypesMatchTheProto(t *testing.T) {
	ours := map[string]EventType{
		"FULL_SNAPSHOT": FullSnapshot, "ENDPOINT_ADDED": EndpointAdded, "ENDPOINT_REMOVED": EndpointRemoved,
		"ENDPOINT_UPDATED": EndpointUpdated, "SNAPSHOT_COMPLETE": SnapshotComplete, "PROGRESS": Progress, "BATCH": Batch,
	}
	if len(ours) != len(registrarv1.EndpointEvent_EventType_value) {
		t.Errorf("the .proto has %d event types, wire knows %d", len(registrarv1.EndpointEvent_EventType_value), len(ours))
	}
	for name, num := range registrarv1.EndpointEvent_EventType_value {
		if got, ok := ours[name]; !ok || int32(got) != num {
			t.Errorf("%s is %d in the .proto, %d (known %v) here", name, num, got, ok)
		}
	}
}

// The endpoint codec writes endpoint.Health as the enum's number and reads the
// number back with endpoint.HealthFromWire: every value of the .proto's Health
// is the state of the same name, and every state has its value there.
func TestHealthValuesMatchTheProto(t *testing.T) {
	states := 0
	for h := endpoint.Health(0); h.Valid(); h++ {
		states++
	}
	if len(registryv1.Health_value) != states {
		t.Errorf("the .proto has %d health values, endpoint %d", len(registryv1.Health_value), states)
	}
	for name, num := range registryv1.Health_value {
		h := endpoint.HealthFromWire(num)
		if want := "HEALTH_" + strings.ToUpper(h.String()); want != name || int32(h) != num {
			t.Errorf("%s is %d in the .proto; endpoint reads %d as %s", name, num, num, h)
		}
	}
}
