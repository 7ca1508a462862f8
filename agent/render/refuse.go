package render

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Refusal is an endpoint a rendering left out, and why: one of its values holds
// control characters (endpoint.HasControl) and the template would have printed it,
// or it sits where no template may see it (a name, an annotation key).
type Refusal struct {
	Endpoint endpoint.Key
	// Field names the value: "node", "annotations[team]", or "annotations" for a key.
	Field string
	Value string
}

// refused stands in, in a template's data, for a value with control characters: such
// a value can end a line, a block or a statement of the file, so no other node's entry
// may print one into it. It has no exported field and no method that returns the
// value. Whatever formats it (the template printing it, print, printf, println, html,
// js, urlquery, every fmt verb but %T, %p and %w, which print no value) records the
// refusal and prints nothing, and Render renders again without its endpoint.
// Comparing it, measuring it or passing it where a string is wanted fails the
// execution, which leaves the endpoint out too. raw hands out the value as stored,
// and the escaping helpers write it escaped.
type refused struct{ r *refusedValue }

// refusedValue is what a stand-in holds, behind a pointer: fmt verbs that bypass
// Format (%p, %w outside an error) print a value's fields by reflection, and this way
// they find only an address.
type refusedValue struct {
	value string
	why   Refusal
	pass  *pass
}

// The methods have value receivers: a value in a map is not addressable, and fmt,
// given a refused without them, would print its fields.

func (r refused) Format(fmt.State, rune) { r.refuse() }

func (r refused) String() string {
	r.refuse()
	return ""
}

// MarshalJSON writes the value as a JSON string, every control character escaped
// (encoding/json leaves U+007F-U+009F as they are): it cannot change the structure of
// the document, nor of a file a template prints it into.
func (r refused) MarshalJSON() ([]byte, error) { return escapedJSON(r.r.value) }

func (r refused) refuse() {
	if _, ok := r.r.pass.printed[r.r.why.Endpoint]; !ok {
		r.r.pass.printed[r.r.why.Endpoint] = r.r.why
	}
}

// escapedJSON is v's JSON with every control character escaped.
func escapedJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []byte(escapeControls(string(b))), nil
}

// pass is one execution of a template over a snapshot of endpoints.
type pass struct {
	eps []endpoint.Endpoint
	// leaveOut is shared by the passes of one rendering and grows from one to the
	// next: the endpoints left out, and why.
	leaveOut map[endpoint.Key]Refusal
	// strict leaves out every endpoint with a refused value, printed or not: the last
	// pass, which therefore never needs another.
	strict bool
	// handed holds the endpoints whose refused values the template was given, printed
	// those of them it printed.
	handed, printed map[endpoint.Key]Refusal
}

// maxGuidedPasses bounds the passes that leave out only what the template printed; a
// template whose output depends on what it was given may reveal one more each time.
const maxGuidedPasses = 3

func newPass(eps []endpoint.Endpoint, leaveOut map[endpoint.Key]Refusal, strict bool) *pass {
	return &pass{eps: eps, leaveOut: leaveOut, strict: strict, handed: map[endpoint.Key]Refusal{}, printed: map[endpoint.Key]Refusal{}}
}

// widen reports whether the pass must be run again, after adding to leaveOut what the
// next must leave out: the endpoints whose refused values were printed; or, when the
// execution failed, every endpoint whose refused values the template was given, since
// comparing or measuring one fails and which one failed is not known.
func (p *pass) widen(err error) bool {
	switch {
	case len(p.printed) > 0:
		maps.Copy(p.leaveOut, p.printed)
	case err != nil && len(p.handed) > 0:
		maps.Copy(p.leaveOut, p.handed)
	default:
		return false
	}
	return true
}

// registrations is the template function: the matching endpoints, as the template may
// see them (view).
func (p *pass) registrations(cluster, protocol, service, ip string) (any, error) {
	eps, err := Lookup(p.eps, endpoint.Filter{Cluster: cluster, Protocol: protocol, Service: service, Address: ip})
	if err != nil {
		return nil, err
	}
	// The common case keeps its slice of endpoints: nothing copied, nothing boxed.
	if !slices.ContainsFunc(eps, hasControl) {
		return eps, nil
	}
	out := make([]any, 0, len(eps))
	for _, e := range eps {
		if v, ok := p.view(e); ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// view is what the template gets of e: e itself, a stand-in whose refused values
// print nothing, or nothing (false) when e is left out.
func (p *pass) view(e endpoint.Endpoint) (any, bool) {
	why, kind := inspect(e)
	if kind == clean {
		return e, true
	}
	k := e.Key()
	if _, out := p.leaveOut[k]; out {
		return nil, false
	}
	if kind == unusable || p.strict {
		p.leaveOut[k] = why
		return nil, false
	}
	if _, ok := p.handed[k]; !ok {
		p.handed[k] = why
	}
	return p.standIn(e), true
}

type care int

const (
	clean     care = iota
	refusable      // a node or annotation value with control characters
	unusable       // a name or annotation key with control characters
)

func hasControl(e endpoint.Endpoint) bool {
	_, kind := inspect(e)
	return kind != clean
}

// inspect finds e's values with control characters. One in a name or an annotation key
// makes the whole endpoint unusable: no compliant writer stores one, and a template
// ranging over the annotations prints their keys. One in the node or an annotation
// value is refused where the template prints it. The reason given is the first such
// value by field name, so that it is the same on every pass.
func inspect(e endpoint.Endpoint) (Refusal, care) {
	k := e.Key()
	for _, f := range [...]struct{ name, value string }{
		{"cluster", e.Cluster}, {"service", e.Service}, {"protocol", e.Protocol}, {"address", e.Address},
	} {
		if endpoint.HasControl(f.value) {
			return Refusal{k, f.name, f.value}, unusable
		}
	}
	why, kind := Refusal{}, clean
	for name, v := range e.Annotations {
		if endpoint.HasControl(name) {
			return Refusal{k, "annotations", name}, unusable
		}
		if !endpoint.HasControl(v) {
			continue
		}
		if f := "annotations[" + name + "]"; kind == clean || f < why.Field {
			why, kind = Refusal{k, f, v}, refusable
		}
	}
	if kind == clean && endpoint.HasControl(e.Node) {
		return Refusal{k, "node", e.Node}, refusable
	}
	return why, kind
}

// standIn is what a template sees of an endpoint with refused values: the fields of
// endpoint.Endpoint, with the node and each annotation value a string, or a refused
// in place of one with control characters. It holds nothing unexported, so printing
// it whole shows nothing its fields do not.
type standIn struct {
	Cluster, Service, Protocol, Address string
	Port                                int
	Node                                any
	Priority, Weight                    int
	Annotations                         annotations
	TTL                                 endpoint.TTL
	Region, Zone                        string
	Health                              endpoint.Health
}

func (p *pass) standIn(e endpoint.Endpoint) standIn {
	s := standIn{Cluster: e.Cluster, Service: e.Service, Protocol: e.Protocol, Address: e.Address, Port: e.Port,
		Node: p.value(e, "node", e.Node), Priority: e.Priority, Weight: e.Weight, TTL: e.TTL,
		Region: e.Region, Zone: e.Zone, Health: e.Health, Annotations: make(annotations, len(e.Annotations))}
	for k, v := range e.Annotations {
		s.Annotations[k] = p.value(e, "annotations["+k+"]", v)
	}
	return s
}

func (p *pass) value(e endpoint.Endpoint, field, v string) any {
	if !endpoint.HasControl(v) {
		return v
	}
	return refused{&refusedValue{value: v, why: Refusal{e.Key(), field, v}, pass: p}}
}

// Key and InstanceID are endpoint.Endpoint's, for templates that call them.
func (s standIn) Key() endpoint.Key {
	return endpoint.Key{Cluster: s.Cluster, Service: s.Service, Protocol: s.Protocol, Address: s.Address, Port: s.Port}
}

func (s standIn) InstanceID() string { return s.Key().InstanceID() }

// MarshalJSON writes the endpoint's JSON payload form, as endpoint.Endpoint does.
func (s standIn) MarshalJSON() ([]byte, error) {
	e := endpoint.Endpoint{Cluster: s.Cluster, Service: s.Service, Protocol: s.Protocol, Address: s.Address, Port: s.Port,
		Node: stored(s.Node), Priority: s.Priority, Weight: s.Weight, TTL: s.TTL, Region: s.Region, Zone: s.Zone,
		Health: s.Health, Annotations: make(map[string]string, len(s.Annotations))}
	for k, v := range s.Annotations {
		e.Annotations[k] = stored(v)
	}
	return escapedJSON(e)
}

// stored is the value a stand-in's field holds, refused or not.
func stored(v any) string {
	if r, ok := v.(refused); ok {
		return r.r.value
	}
	s, _ := v.(string)
	return s
}

// sortedRefusals lists the endpoints left out, by key.
func sortedRefusals(m map[endpoint.Key]Refusal) []Refusal {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b Refusal) int { return cmp.Compare(a.Endpoint.String(), b.Endpoint.String()) })
	return out
}
