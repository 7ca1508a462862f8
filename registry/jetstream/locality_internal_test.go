package jetstream

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestLocalityRoundTrip: what appendJSON writes, both decoders read back whole.
func TestLocalityRoundTrip(t *testing.T) {
	for _, e := range localitySamples() {
		data := appendJSON(nil, e)
		for name, decode := range decoders() {
			if got, err := decode(data); err != nil || !endpoint.Equal(got, e) {
				t.Errorf("%s(%s) = %+v, %v; want %+v", name, data, got, err, e)
			}
		}
	}
}

func decoders() map[string]func([]byte) (endpoint.Endpoint, error) {
	return map[string]func([]byte) (endpoint.Endpoint, error){
		"decodeJSON":  func(b []byte) (endpoint.Endpoint, error) { return decodeJSON(b, &interner{}) },
		"decodeLoose": decodeLoose,
	}
}

// TestLocalityReadLiberally: how a reader treats the reserved annotations it finds,
// by either decoder. Any health is lifted, one it does not know as unhealthy; a
// region or zone is lifted when a read accepts it (endpoint.ReadablePlace: any
// printable name without spaces), else it stays an ordinary annotation; other keys
// under the prefix stay too; top-level region, zone and health are not read.
func TestLocalityReadLiberally(t *testing.T) {
	const head = `{"cluster":"c","service":"s","protocol":"p","address":"10.0.0.1","port":80,"priority":1`
	for _, c := range []struct {
		name, tail string
		want       endpoint.Endpoint // locality and annotations only
	}{
		{"all three", `,"annotations":{"endpoint.switchboard.dev/health":"draining","endpoint.switchboard.dev/region":"eu","endpoint.switchboard.dev/zone":"eu-1a"}}`,
			endpoint.Endpoint{Region: "eu", Zone: "eu-1a", Health: endpoint.Draining}},
		{"unknown health", `,"annotations":{"endpoint.switchboard.dev/health":"quarantined","team":"edge"}}`,
			endpoint.Endpoint{Health: endpoint.Unhealthy, Annotations: map[string]string{"team": "edge"}}},
		{"health in capitals", `,"annotations":{"endpoint.switchboard.dev/health":"UNHEALTHY"}}`,
			endpoint.Endpoint{Health: endpoint.Unhealthy}},
		{"healthy spelled out", `,"annotations":{"endpoint.switchboard.dev/health":"healthy"}}`,
			endpoint.Endpoint{}},
		{"region not a name", `,"annotations":{"endpoint.switchboard.dev/region":"9 bad","endpoint.switchboard.dev/zone":"z"}}`,
			endpoint.Endpoint{Zone: "z", Annotations: map[string]string{annRegion: "9 bad"}}},
		{"another writer's place names", `,"annotations":{"endpoint.switchboard.dev/region":"dc1.eu","endpoint.switchboard.dev/zone":"1"}}`,
			endpoint.Endpoint{Region: "dc1.eu", Zone: "1"}},
		{"empty zone", `,"annotations":{"endpoint.switchboard.dev/zone":""}}`,
			endpoint.Endpoint{Annotations: map[string]string{annZone: ""}}},
		{"other reserved key", `,"annotations":{"endpoint.switchboard.dev/weight":"3"}}`,
			endpoint.Endpoint{Annotations: map[string]string{endpoint.ReservedAnnotationPrefix + "weight": "3"}}},
		{"top-level fields", `,"region":"eu","zone":"eu-1a","health":"draining"}`, endpoint.Endpoint{}},
		{"CCM entry", `,"ttl":"30s"}`, endpoint.Endpoint{}},
	} {
		for name, decode := range decoders() {
			got, err := decode([]byte(head + c.tail))
			if err != nil {
				t.Errorf("%s, %s: %v", c.name, name, err)
				continue
			}
			if got.Region != c.want.Region || got.Zone != c.want.Zone || got.Health != c.want.Health ||
				!maps.Equal(got.Annotations, c.want.Annotations) {
				t.Errorf("%s, %s: read region %q zone %q health %v annotations %v; want %q %q %v %v", c.name, name,
					got.Region, got.Zone, got.Health, got.Annotations, c.want.Region, c.want.Zone, c.want.Health, c.want.Annotations)
			}
		}
	}
}

// TestMostAnnotationsWithLocality: an endpoint with as many annotations as Validate
// allows still gets its three reserved ones on the wire, and reads back whole, with
// no more annotations than a write allows.
func TestMostAnnotationsWithLocality(t *testing.T) {
	e := endpoint.Endpoint{Cluster: "c", Service: "s", Protocol: "p", Address: "10.0.0.1", Port: 80, Priority: 1,
		Region: "eu", Zone: "eu-1a", Health: endpoint.Draining, Annotations: map[string]string{}}
	for i := 0; e.Validate() == nil; i++ {
		e.Annotations[fmt.Sprintf("k%02d", i)] = "v"
	}
	delete(e.Annotations, fmt.Sprintf("k%02d", len(e.Annotations)-1))
	if err := e.Validate(); err != nil || len(e.Annotations) != 64 {
		t.Fatalf("%d annotations: %v; this test expects 64 to be the limit", len(e.Annotations), err)
	}
	data := appendJSON(nil, e)
	if n := strings.Count(string(data), `":"v"`) + strings.Count(string(data), `"endpoint.switchboard.dev/`); n != 67 {
		t.Fatalf("payload carries %d annotations, want 64 and 3 reserved: %s", n, data)
	}
	for name, decode := range decoders() {
		got, err := decode(data)
		if err != nil || !endpoint.Equal(got, e) {
			t.Fatalf("%s: read %+v, %v; want %+v", name, got, err, e)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: what was read fails the write rules: %v", name, err)
		}
	}
}
