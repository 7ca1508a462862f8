package wire

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// Field numbers of switchboard.registry.v1.Endpoint.
const (
	EndpointFieldCluster     protowire.Number = 1
	EndpointFieldService     protowire.Number = 2
	EndpointFieldProtocol    protowire.Number = 3
	EndpointFieldAddress     protowire.Number = 4
	EndpointFieldPort        protowire.Number = 5
	EndpointFieldNode        protowire.Number = 6
	EndpointFieldPriority    protowire.Number = 7
	EndpointFieldWeight      protowire.Number = 8
	EndpointFieldAnnotations protowire.Number = 9
	EndpointFieldTTL         protowire.Number = 10
	EndpointFieldTTLNever    protowire.Number = 11
	EndpointFieldInstanceID  protowire.Number = 12
	EndpointFieldRegion      protowire.Number = 13
	EndpointFieldZone        protowire.Number = 14
	EndpointFieldHealth      protowire.Number = 15
)

// Field numbers of an annotations map entry.
const (
	MapEntryFieldKey   protowire.Number = 1
	MapEntryFieldValue protowire.Number = 2
)

// MarshalEndpoint returns the wire form of one endpoint.
func MarshalEndpoint(e endpoint.Endpoint) []byte {
	// Deterministic: one endpoint has one wire form, in every process, so that
	// state digests agree across replicas. vtprotobuf's MarshalVT writes the fields
	// in number order as protobuf does, in half the time, but its map entries in
	// map order: it serves endpoints with at most one annotation, whose bytes are
	// then protobuf's deterministic ones (TestMarshalEndpointIsDeterministic).
	// It does not check UTF-8, which protobuf's Marshal does: such an endpoint
	// goes the slow way, to fail there as before.
	p := e.ToProto()
	if len(e.Annotations) < 2 && validStrings(p) {
		if b, err := p.MarshalVT(); err == nil {
			return b
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		// Marshal fails only for invalid UTF-8 in a string field, which Validate and
		// every backend reject before an endpoint gets here.
		panic(fmt.Sprintf("wire: marshal endpoint %s: %v", e.Key(), err))
	}
	return b
}

// validStrings reports whether every string field of p is valid UTF-8.
func validStrings(p *registryv1.Endpoint) bool {
	for _, s := range [...]string{p.Cluster, p.Service, p.Protocol, p.Address, p.Node, p.InstanceId, p.Region, p.Zone} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	for k, v := range p.Annotations {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// wireDecoder decodes a run of endpoints in wire form (a listing, or a part of one).
// It shares the strings that repeat between them; its table of them is cleared when
// it goes back to the pool, so that no listing keeps another's strings alive.
type wireDecoder struct {
	strs map[string]string
	last [EndpointFieldHealth + 1]string // the last string of each field: often the next one too
	// Addresses are unique to their endpoints: they are gathered into one buffer
	// and made one string (addresses), each endpoint's a part of it, instead of a
	// string allocation each. ends holds, for each endpoint decoded, where its
	// address ends in arena (it starts where the previous one ends); a protobuf
	// message is under 2 GiB, so a uint32 holds any offset.
	arena []byte
	ends  []uint32
}

// decoders keeps wireDecoders between listings: their buffers, ends and string
// table are scratch, and a whole-registry listing would otherwise allocate them
// anew, hundreds of kilobytes, on every call.
var decoders = sync.Pool{New: func() any { return &wireDecoder{strs: map[string]string{}} }}

// getWireDecoder returns a decoder with room for a run of about size bytes of
// endpoints, of about 64 bytes each with addresses of about 11.
func getWireDecoder(size int) *wireDecoder {
	d := decoders.Get().(*wireDecoder)
	d.arena = slices.Grow(d.arena[:0], size/5)
	d.ends = slices.Grow(d.ends[:0], size/48)
	return d
}

// release returns d to the pool, without the strings it handed out.
func (d *wireDecoder) release() {
	clear(d.strs)
	d.last = [EndpointFieldHealth + 1]string{}
	decoders.Put(d)
}

// addresses sets the addresses of eps, the endpoints decoded, from one string of
// them all, and normalizes them (which only looks at the address). A caller that
// keeps one of the endpoints keeps that string: the part's addresses, about 11
// bytes an endpoint.
func (d *wireDecoder) addresses(eps []endpoint.Endpoint) {
	all := string(d.arena)
	start := uint32(0)
	for k, end := range d.ends {
		if end > start {
			eps[k].Address = all[start:end]
			eps[k].Normalize()
		}
		start = end
	}
	d.arena, d.ends = d.arena[:0], d.ends[:0]
}

// endpoint decodes a registryv1.Endpoint into e, which is zero, converting it as
// endpoint.FromProtoUnchecked does but for its address, which addresses sets once
// the part is decoded. Like protobuf, it skips unknown fields and fields whose wire
// type is not the declared one, takes the last of repeated scalars and merges
// repeated ttl messages.
func (d *wireDecoder) endpoint(e *endpoint.Endpoint, b []byte) error {
	var ttl Duration
	never := false
	var address []byte
	for len(b) > 0 {
		num, typ, v, rest, err := NextField(b)
		if err != nil {
			return err
		}
		b = rest
		if num == EndpointFieldAddress && typ == protowire.BytesType { // the last one counts
			if !utf8.Valid(v) { // every one is checked, as protobuf checks them
				return errors.New("address is not valid UTF-8")
			}
			address = v
			continue
		}
		if err := d.endpointField(e, &ttl, &never, num, typ, v); err != nil {
			return err
		}
	}
	if err := setTTL(e, ttl, never); err != nil {
		return err
	}
	d.arena = append(d.arena, address...)
	d.ends = append(d.ends, uint32(len(d.arena)))
	return nil
}

func (d *wireDecoder) endpointField(e *endpoint.Endpoint, ttl *Duration, never *bool, num protowire.Number, typ protowire.Type, v []byte) error {
	if typ == protowire.VarintType {
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case EndpointFieldPort:
			e.Port = int(uint32(x))
		case EndpointFieldPriority:
			e.Priority = int(uint32(x))
		case EndpointFieldWeight:
			e.Weight = int(uint32(x))
		case EndpointFieldTTLNever:
			*never = x != 0
		case EndpointFieldHealth:
			e.Health = endpoint.HealthFromWire(int32(x))
		}
		return nil
	}
	if typ != protowire.BytesType {
		return nil
	}
	var err error
	switch num {
	case EndpointFieldCluster:
		e.Cluster, err = d.field(EndpointFieldCluster, "cluster", v)
	case EndpointFieldService:
		e.Service, err = d.field(EndpointFieldService, "service", v)
	case EndpointFieldProtocol:
		e.Protocol, err = d.field(EndpointFieldProtocol, "protocol", v)
	case EndpointFieldNode:
		e.Node, err = d.field(EndpointFieldNode, "node", v)
	case EndpointFieldRegion:
		e.Region, err = d.field(EndpointFieldRegion, "region", v)
	case EndpointFieldZone:
		e.Zone, err = d.field(EndpointFieldZone, "zone", v)
	case EndpointFieldInstanceID: // recomputed from the key, never kept
		if !utf8.Valid(v) {
			err = errors.New("instance_id is not valid UTF-8")
		}
	case EndpointFieldAnnotations:
		err = d.annotation(e, v)
	case EndpointFieldTTL:
		if err = ttl.Merge(v); err != nil {
			err = fmt.Errorf("ttl: %w", err)
		}
	}
	return err
}

// annotation decodes one map entry (key 1, value 2; a missing one is empty).
func (d *wireDecoder) annotation(e *endpoint.Endpoint, b []byte) error {
	var k, val string
	for len(b) > 0 {
		num, typ, v, rest, err := NextField(b)
		if err != nil {
			return fmt.Errorf("annotations: %w", err)
		}
		b = rest
		if typ != protowire.BytesType || (num != MapEntryFieldKey && num != MapEntryFieldValue) {
			continue
		}
		s, err := d.str("annotation", v)
		if err != nil {
			return err
		}
		if num == MapEntryFieldKey {
			k = s
		} else {
			val = s
		}
	}
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[k] = val
	return nil
}

// field returns the value of string field num, as str does, trying first the last
// value of that field (an endpoint's cluster and protocol are mostly its
// neighbour's).
func (d *wireDecoder) field(num protowire.Number, name string, v []byte) (string, error) {
	if last := d.last[num]; last == string(v) {
		return last, nil
	}
	s, err := d.str(name, v)
	d.last[num] = s
	return s, err
}

// str returns v as a string, shared with every equal one this decoder returned.
func (d *wireDecoder) str(field string, v []byte) (string, error) {
	if s, ok := d.strs[string(v)]; ok { // no allocation: the compiler reads the map in place
		return s, nil
	}
	if !utf8.Valid(v) {
		return "", fmt.Errorf("%s is not valid UTF-8", field)
	}
	s := string(v)
	d.strs[s] = s
	return s, nil
}

// setTTL applies ttl and ttl_never as endpoint.FromProtoUnchecked does, with
// durationpb's validity rules.
func setTTL(e *endpoint.Endpoint, ttl Duration, never bool) error {
	switch {
	case never:
		e.TTL = endpoint.Never
	case ttl.Set:
		if !ttl.Valid() {
			return &endpoint.FieldError{Field: "ttl", Value: fmt.Sprintf("%ds %dns", ttl.Seconds, ttl.Nanos), Rule: "is not a valid duration"}
		}
		e.TTL = endpoint.TTL(ttl.AsDuration())
		if e.TTL <= 0 {
			return &endpoint.FieldError{Field: "ttl", Value: e.TTL.String(), Rule: "must be positive (use ttl_never)"}
		}
	}
	return nil
}
