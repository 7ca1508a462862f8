package endpoint

import (
	"fmt"
	"maps"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// ToProto converts e to its wire form; the instance id is filled in.
func (e Endpoint) ToProto() *registryv1.Endpoint {
	p := &registryv1.Endpoint{
		Cluster:    e.Cluster,
		Service:    e.Service,
		Protocol:   e.Protocol,
		Address:    e.Address,
		Port:       clampUint32(e.Port),
		Node:       e.Node,
		Priority:   clampUint32(e.Priority),
		Weight:     clampUint32(e.Weight),
		InstanceId: e.InstanceID(),
		Region:     e.Region,
		Zone:       e.Zone,
		Health:     registryv1.Health(e.Health),
	}
	if len(e.Annotations) > 0 {
		p.Annotations = maps.Clone(e.Annotations)
	}
	switch {
	case e.TTL.IsNever():
		p.TtlNever = true
	case e.TTL > 0:
		p.Ttl = durationpb.New(time.Duration(e.TTL))
	}
	return p
}

// FromProto converts the wire form to an Endpoint and validates it, so a bad request
// is rejected with the field it got wrong. A nil message is an error.
func FromProto(p *registryv1.Endpoint) (Endpoint, error) {
	e, err := FromProtoUnchecked(p)
	if err != nil {
		return Endpoint{}, err
	}
	if err := e.Validate(); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// FromProtoUnchecked converts without validating: for reading an unregister, which
// only needs the key, and for data that was validated when it was written. Values that
// do not fit an int are reported, since they cannot be validated later.
func FromProtoUnchecked(p *registryv1.Endpoint) (Endpoint, error) {
	if p == nil {
		return Endpoint{}, &FieldError{"endpoint", "", "is required"}
	}
	e := Endpoint{
		Cluster:  p.GetCluster(),
		Service:  p.GetService(),
		Protocol: p.GetProtocol(),
		Address:  p.GetAddress(),
		Port:     int(p.GetPort()),
		Node:     p.GetNode(),
		Priority: int(p.GetPriority()),
		Weight:   int(p.GetWeight()),
		Region:   p.GetRegion(),
		Zone:     p.GetZone(),
		Health:   HealthFromWire(int32(p.GetHealth())),
	}
	if len(p.GetAnnotations()) > 0 {
		e.Annotations = maps.Clone(p.GetAnnotations())
	}
	switch {
	case p.GetTtlNever():
		e.TTL = Never
	case p.GetTtl() != nil:
		if err := p.GetTtl().CheckValid(); err != nil {
			return Endpoint{}, &FieldError{"ttl", p.GetTtl().String(), fmt.Sprintf("is not a valid duration: %v", err)}
		}
		e.TTL = TTL(p.GetTtl().AsDuration())
		if e.TTL <= 0 {
			return Endpoint{}, &FieldError{"ttl", e.TTL.String(), "must be positive (use ttl_never)"}
		}
	}
	e.Normalize()
	return e, nil
}

func clampUint32(v int) uint32 {
	if v < 0 {
		return 0
	}
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// HealthFromWire maps the wire enum to Health. A value this release does not know (a
// newer writer's state) is Unhealthy: nothing is routed to the endpoint, and the entry
// stays readable.
func HealthFromWire(v int32) Health {
	if v < 0 || v >= int32(len(healthNames)) {
		return Unhealthy
	}
	return Health(v)
}
