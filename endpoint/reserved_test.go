package endpoint

import (
	"errors"
	"strings"
	"testing"
)

// TestReservedAnnotationPrefix: our writes refuse a user annotation under the prefix
// the JetStream backend keeps for region, zone and health, naming the key; reads keep
// it, since another writer may have stored one.
func TestReservedAnnotationPrefix(t *testing.T) {
	base := Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1}
	for _, k := range []string{ReservedAnnotationPrefix + "region", ReservedAnnotationPrefix + "zone",
		ReservedAnnotationPrefix + "health", ReservedAnnotationPrefix + "anything-else"} {
		e := base.Clone()
		e.Annotations = map[string]string{"team": "edge", k: "v"}
		err := e.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("Validate with annotation %s = %v, want a *FieldError", k, err)
		}
		if fe.Field != "annotations["+k+"]" || !strings.Contains(fe.Rule, "reserved") || !strings.Contains(fe.Rule, ReservedAnnotationPrefix) {
			t.Errorf("Validate with annotation %s = %+v, want field annotations[%s] and a rule saying the prefix is reserved", k, fe, k)
		}
		if err := e.ValidateRead(); err != nil {
			t.Errorf("ValidateRead with annotation %s = %v, want it read", k, err)
		}
	}
	// Only the prefix itself is reserved: look-alikes are ordinary keys.
	for _, k := range []string{"switchboard.dev/region", "endpoint.switchboard.dev", "x.endpoint.switchboard.dev/region",
		"endpoint.switchboard.devs/region"} {
		e := base.Clone()
		e.Annotations = map[string]string{k: "v"}
		if err := e.Validate(); err != nil {
			t.Errorf("Validate with annotation %s = %v, want it accepted", k, err)
		}
	}
}
