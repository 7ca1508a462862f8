package endpoint

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

func located() Endpoint {
	e := valid()
	e.Region, e.Zone, e.Health = "us-east-1", "us-east-1a", Draining
	return e
}

// TestLocalityValidation: region and zone are optional names, checked like a service
// name on a write and on a read; health is one of three states.
func TestLocalityValidation(t *testing.T) {
	if err := located().Validate(); err != nil {
		t.Fatalf("Validate(located) = %v", err)
	}
	for _, c := range []struct {
		name   string
		mutate func(*Endpoint)
		field  string
	}{
		{"zone with a space", func(e *Endpoint) { e.Zone = "us east" }, "zone"},
		{"zone with a newline", func(e *Endpoint) { e.Zone = "a\nb" }, "zone"},
		{"region too long", func(e *Endpoint) { e.Region = "r" + strings.Repeat("x", 253) }, "region"},
		{"unknown health", func(e *Endpoint) { e.Health = Health(7) }, "health"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := located()
			c.mutate(&e)
			for name, err := range map[string]error{"Validate": e.Validate(), "ValidateRead": e.ValidateRead()} {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != c.field {
					t.Fatalf("%s() = %v, want a FieldError on %s", name, err, c.field)
				}
			}
		})
	}
	// Read liberally: another writer's place names that are not our names stay
	// readable; our writes refuse them.
	for _, mutate := range []func(*Endpoint){
		func(e *Endpoint) { e.Zone = "1" }, func(e *Endpoint) { e.Zone = "dc1.rack2" },
		func(e *Endpoint) { e.Region = "a/b" }, func(e *Endpoint) { e.Region = "1region" },
	} {
		e := located()
		mutate(&e)
		if err := e.ValidateRead(); err != nil {
			t.Errorf("ValidateRead(%q/%q) = %v, want nil", e.Region, e.Zone, err)
		}
		var fe *FieldError
		if err := e.Validate(); !errors.As(err, &fe) || (fe.Field != "zone" && fe.Field != "region") {
			t.Errorf("Validate(%q/%q) = %v, want a FieldError on the place", e.Region, e.Zone, err)
		}
	}
	if h, err := ParseHealth("Draining"); err != nil || h != Draining {
		t.Fatalf("ParseHealth(Draining) = %v, %v", h, err)
	}
	if _, err := ParseHealth("sick"); err == nil || !strings.Contains(err.Error(), "health") {
		t.Fatalf("ParseHealth(sick) = %v, want an error naming health", err)
	}
	if !Healthy.Routable() || Draining.Routable() || Unhealthy.Routable() {
		t.Fatal("only Healthy is routable")
	}
	if Healthy.Rank() != 0 || Draining.Rank() != 1 || Unhealthy.Rank() != 2 || Health(9).Rank() != 2 {
		t.Fatal("Rank: healthy 0, draining 1, unhealthy and unknown 2")
	}
}

// TestLocalityJSON: the payload carries region, zone and health by name, leaves them
// out when unset (so an entry without them is byte for byte what it was), and reads a
// state it does not know as unhealthy instead of refusing the entry.
func TestLocalityJSON(t *testing.T) {
	b, err := located().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"region":"us-east-1"`, `"zone":"us-east-1a"`, `"health":"draining"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("payload %s lacks %s", b, want)
		}
	}
	got, err := DecodeJSON(b)
	if err != nil || !Equal(got, located()) {
		t.Fatalf("DecodeJSON = %+v, %v", got, err)
	}
	plain, _ := valid().MarshalJSON()
	for _, absent := range []string{"region", "zone", "health"} {
		if strings.Contains(string(plain), absent) {
			t.Errorf("payload of an endpoint without locality %s mentions %s", plain, absent)
		}
	}
	future := strings.Replace(string(b), `"draining"`, `"degraded"`, 1)
	got, err = DecodeJSON([]byte(future))
	if err != nil || got.Health != Unhealthy {
		t.Fatalf("DecodeJSON(unknown health) = %v, %v; want Unhealthy", got.Health, err)
	}
}

// TestLocalityProto: fields 13, 14 and 15 on the wire; a health value from a newer
// writer reads as unhealthy.
func TestLocalityProto(t *testing.T) {
	p := located().ToProto()
	if p.GetRegion() != "us-east-1" || p.GetZone() != "us-east-1a" || p.GetHealth() != registryv1.Health_HEALTH_DRAINING {
		t.Fatalf("ToProto = %v", p)
	}
	got, err := FromProto(p)
	if err != nil || !Equal(got, located()) {
		t.Fatalf("FromProto = %+v, %v", got, err)
	}
	b, err := proto.Marshal(valid().ToProto())
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 15, protowire.VarintType)
	b = protowire.AppendVarint(b, 9)
	var q registryv1.Endpoint
	if err := proto.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if got, err := FromProto(&q); err != nil || got.Health != Unhealthy {
		t.Fatalf("FromProto(health 9) = %v, %v; want Unhealthy", got.Health, err)
	}
	if !Equal(located(), located()) || Equal(located(), valid()) {
		t.Fatal("Equal ignores locality")
	}
}
