package cloudmap

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestLocalityAttributes: region, zone and health are custom attributes, omitted when
// empty or healthy, and read back as written.
func TestLocalityAttributes(t *testing.T) {
	full := ep("prod", "web", "http", "10.0.0.1", 80)
	full.Region, full.Zone, full.Health = "eu-west", "eu-west-1a", endpoint.Draining
	zoneOnly := ep("prod", "web", "http", "10.0.0.2", 80)
	zoneOnly.Zone, zoneOnly.Health = "b", endpoint.Unhealthy
	for _, c := range []struct {
		e    endpoint.Endpoint
		want map[string]string // "" = absent
	}{
		{full, map[string]string{"region": "eu-west", "zone": "eu-west-1a", "health": "draining"}},
		{zoneOnly, map[string]string{"region": "", "zone": "b", "health": "unhealthy"}},
		{ep("prod", "web", "http", "10.0.0.3", 80), map[string]string{"region": "", "zone": "", "health": ""}},
	} {
		a := mustEncode(t, c.e)
		for k, want := range c.want {
			if got, ok := a[k]; (want == "") == ok || got != want {
				t.Errorf("%s: attribute %s = %q (present %v), want %q (empty: absent)", c.e.Key(), k, got, ok, want)
			}
		}
		d, err := decode(c.e.InstanceID(), a)
		if err != nil || !endpoint.Equal(d.ep, c.e) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", c.e, d.ep, err)
		}
	}
}

// TestHealthReadLiberally: an instance without health is healthy (every instance
// written before the field existed), and a state this release does not know is
// unhealthy rather than unreadable.
func TestHealthReadLiberally(t *testing.T) {
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	for v, want := range map[string]endpoint.Health{
		"": endpoint.Healthy, "healthy": endpoint.Healthy, "Draining": endpoint.Draining,
		"unhealthy": endpoint.Unhealthy, "quarantined": endpoint.Unhealthy,
	} {
		a := mustEncode(t, e)
		a["health"] = v
		d, err := decode(e.InstanceID(), a)
		if err != nil || d.ep.Health != want {
			t.Errorf("health attribute %q: decoded %v, %v; want %v", v, d.ep.Health, err, want)
		}
	}
}

// TestLocalityStored goes through the fake: the attributes reach Cloud Map, and a
// health change re-registers the instance, back to healthy without the attribute.
func TestLocalityStored(t *testing.T) {
	f := newFixture(t, cloudmaptest.Options{}, Options{})
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Region, a.Zone, a.Health = "eu-west", "eu-west-1a", endpoint.Draining
	for _, h := range []endpoint.Health{endpoint.Draining, endpoint.Healthy, endpoint.Unhealthy} {
		a.Health = h
		f.apply(registry.Register(a))
		attrs, ok := f.fake.Instance(a.InstanceID())
		if got, has := attrs["health"]; !ok || has != (h != endpoint.Healthy) || (has && got != h.String()) {
			t.Errorf("health %s: stored attributes %v", h, attrs)
		}
		if got := f.list(endpoint.Filter{Service: "web"}); len(got) != 1 || !endpoint.Equal(got[0], a) {
			t.Errorf("health %s: List = %+v, want %+v", h, got, a)
		}
	}
}
