package endpoint

import (
	"encoding/json"
	"fmt"
)

// payload is the JSON form of an endpoint: the body of a JetStream message and the
// value stored by the etcd backend. Field names are part of the wire format.
type payload struct {
	Cluster     string            `json:"cluster"`
	Service     string            `json:"service"`
	Protocol    string            `json:"protocol"`
	Address     string            `json:"address"`
	Port        int               `json:"port"`
	Node        string            `json:"node,omitempty"`
	Priority    int               `json:"priority"`
	Weight      int               `json:"weight,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	TTL         TTL               `json:"ttl,omitempty"`
	Region      string            `json:"region,omitempty"`
	Zone        string            `json:"zone,omitempty"`
	Health      jsonHealth        `json:"health,omitempty"`
}

// jsonHealth is Health in the payload: omitted when healthy, and read liberally: a
// state this release does not know (a newer writer's) is read as Unhealthy, which
// routes nothing to the endpoint, rather than making the entry unreadable.
type jsonHealth Health

func (h jsonHealth) MarshalText() ([]byte, error) { return Health(h).MarshalText() }

func (h *jsonHealth) UnmarshalText(b []byte) error {
	v, err := ParseHealth(string(b))
	if err != nil {
		v = Unhealthy
	}
	*h = jsonHealth(v)
	return nil
}

// MarshalJSON writes the JSON payload form.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(toPayload(e))
}

// UnmarshalJSON reads the JSON payload form. Unknown fields are ignored so that a
// reader keeps working when a newer writer adds one; the result is not validated (call
// Validate or use DecodeJSON).
func (e *Endpoint) UnmarshalJSON(b []byte) error {
	var p payload
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("endpoint JSON: %w", err)
	}
	*e = fromPayload(p)
	return nil
}

func toPayload(e Endpoint) payload {
	return payload{e.Cluster, e.Service, e.Protocol, e.Address, e.Port, e.Node, e.Priority,
		e.Weight, e.Annotations, e.TTL, e.Region, e.Zone, jsonHealth(e.Health)}
}

func fromPayload(p payload) Endpoint {
	return Endpoint{p.Cluster, p.Service, p.Protocol, p.Address, p.Port, p.Node, p.Priority,
		p.Weight, p.Annotations, p.TTL, p.Region, p.Zone, Health(p.Health)}
}

// DecodeJSON parses and validates one endpoint in the JSON payload form. The payload
// is what a backend stores, so it is validated as a read (ValidateRead): what another
// writer stored stays readable.
func DecodeJSON(b []byte) (Endpoint, error) {
	var e Endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return Endpoint{}, err
	}
	if err := e.ValidateRead(); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}
