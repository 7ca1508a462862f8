package wire

import (
	"testing"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
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
