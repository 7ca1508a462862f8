package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestParseLocalityAndHealth: region, zone and health are read into the endpoint;
// absent, they are empty and healthy (the agent fills in its own region and zone).
func TestParseLocalityAndHealth(t *testing.T) {
	m, err := Parse([]byte(`entries:
  - {cluster: prod, service: web, protocol: http, address: 10.0.0.1, region: eu-west, zone: eu-west-1a, health: Draining}
  - {cluster: prod, service: api, protocol: http, address: 10.0.0.1, zone: b, health: unhealthy}
  - {cluster: prod, service: db, protocol: tcp, address: 10.0.0.1, health: healthy}
  - {cluster: prod, service: mq, protocol: tcp, address: 10.0.0.1}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		region, zone string
		health       endpoint.Health
	}{{"eu-west", "eu-west-1a", endpoint.Draining}, {"", "b", endpoint.Unhealthy}, {"", "", endpoint.Healthy}, {"", "", endpoint.Healthy}}
	for i, w := range want {
		e := m.Entries[i].Endpoint
		if e.Region != w.region || e.Zone != w.zone || e.Health != w.health {
			t.Errorf("entry %d: region %q zone %q health %v; want %q %q %v", i, e.Region, e.Zone, e.Health, w.region, w.zone, w.health)
		}
	}
}

// TestLocalityErrorsNameEntryAndField: a bad region, zone or health is reported at
// the value, with the entry and the field.
func TestLocalityErrorsNameEntryAndField(t *testing.T) {
	const head = "entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n"
	for _, c := range []struct{ name, doc, want string }{
		{"zone not a name", head + "    zone: 1a\n", `line 6, column 11: entries[0].zone: invalid endpoint: zone "1a": must match`},
		{"region with a dot", head + "    region: eu.west\n", `line 6, column 13: entries[0].region: invalid endpoint: region "eu.west"`},
		{"zone a list", head + "    zone: [a]\n", "line 6, column 11: entries[0].zone: want a single value"},
		{"unknown health", head + "    health: sick\n", `line 6, column 13: entries[0].health: invalid endpoint: health "sick": must be healthy, unhealthy or draining`},
		{"health a mapping", head + "    health: {a: b}\n", "entries[0].health: want a single value"},
		{"second entry", head + "  - {cluster: prod, service: api, protocol: http, address: 10.0.0.1, zone: -x}\n", "line 6, column 76: entries[1].zone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

// TestLocalityFromEnvironment: a DaemonSet's manifest takes its zone from the node.
func TestLocalityFromEnvironment(t *testing.T) {
	t.Setenv("SB_TEST_ZONE", "us-east-1c")
	m, err := loadEnv([]byte("entries:\n  - {cluster: prod, service: web, protocol: http, address: 10.0.0.1, zone: \"${SB_TEST_ZONE}\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if z := m.Entries[0].Endpoint.Zone; z != "us-east-1c" {
		t.Fatalf("zone %q, want us-east-1c", z)
	}
}
