package jetstream

import (
	"maps"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The payload is CCM's, and CCM's schema has no region, zone or health: a reader
// that knows only that schema must keep reading our entries, and ours must keep
// reading CCM's. So the three travel as annotations under the prefix package endpoint
// reserves (our writes refuse user annotations there), never as top-level fields: a
// CCM reader sees three more plain annotations, and a CCM entry, having none, reads
// as healthy with no locality. docs/backends.md, "Compatibility contract", sets out
// the keys and how a reader treats odd values.
const (
	annRegion = endpoint.ReservedAnnotationPrefix + "region"
	annZone   = endpoint.ReservedAnnotationPrefix + "zone"
	annHealth = endpoint.ReservedAnnotationPrefix + "health"
)

// localityAnn is the reserved annotations one endpoint's payload carries: region and
// zone when set, health when not healthy. An array, not a map: appendJSON builds one
// for every message it writes, and most have none.
type localityAnn struct {
	keys, values [3]string
	n            int
}

func localityOf(e endpoint.Endpoint) localityAnn {
	var l localityAnn
	l.add(annRegion, e.Region, e.Region != "")
	l.add(annZone, e.Zone, e.Zone != "")
	l.add(annHealth, e.Health.String(), e.Health != endpoint.Healthy)
	return l
}

func (l *localityAnn) add(k, v string, set bool) {
	if set {
		l.keys[l.n], l.values[l.n] = k, v
		l.n++
	}
}

// lookup returns the value l carries under k, if any. It also tells appendJSON which
// user annotations the fields override; Validate refuses such annotations, so that
// happens only for an endpoint that bypassed it.
func (l *localityAnn) lookup(k string) (string, bool) {
	for i := range l.n {
		if l.keys[i] == k {
			return l.values[i], true
		}
	}
	return "", false
}

// wireForm returns e as its payload carries it: region, zone and health moved into
// the reserved annotations (a new map), the fields cleared. appendJSON writes what
// encoding/json writes for it.
func wireForm(e endpoint.Endpoint) endpoint.Endpoint {
	l := localityOf(e)
	e.Region, e.Zone, e.Health = "", "", endpoint.Healthy
	if l.n == 0 {
		return e
	}
	m := make(map[string]string, len(e.Annotations)+l.n)
	maps.Copy(m, e.Annotations)
	for i := range l.n {
		m[l.keys[i]] = l.values[i]
	}
	e.Annotations = m
	return e
}

// liftLocality moves the reserved annotations of a payload read back into the
// fields, reading liberally: any health value is lifted, one this release does not
// know as Unhealthy (as package endpoint reads a payload's health), so that nothing
// routes to an endpoint whose state is unclear; a region or zone a read does not
// accept (empty, or with spaces or control characters) stays an ordinary annotation,
// so the entry stays usable, without locality, and the odd value stays visible. The map is the decoder's own, changed in place.
func liftLocality(e *endpoint.Endpoint) {
	if len(e.Annotations) == 0 {
		return
	}
	if v, ok := e.Annotations[annHealth]; ok {
		h, err := endpoint.ParseHealth(v)
		if err != nil {
			h = endpoint.Unhealthy
		}
		e.Health = h
		delete(e.Annotations, annHealth)
	}
	e.Region = liftName(e.Annotations, annRegion)
	e.Zone = liftName(e.Annotations, annZone)
	if len(e.Annotations) == 0 {
		e.Annotations = nil // as a payload without annotations reads
	}
}

// liftName removes and returns m[k] if a read accepts it as a place name
// (endpoint.ReadablePlace, the rule every backend reads region and zone by); else it
// leaves m alone.
func liftName(m map[string]string, k string) string {
	v, ok := m[k]
	if !ok || !endpoint.ReadablePlace(v) {
		return ""
	}
	delete(m, k)
	return v
}
