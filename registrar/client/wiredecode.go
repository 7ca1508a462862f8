package client

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// A listing of the whole registry is tens of thousands of endpoints whose cluster,
// service, protocol and node repeat. protobuf's generated decoder allocates a
// message and a string per field for each of them, and converting to
// endpoint.Endpoint copies again; decoding the wire form directly, with repeated
// strings shared and the addresses cut from one string, allocates a few times per
// listing, not per endpoint.

// Field numbers of registryv1.Endpoint and of the messages around it.
const (
	epCluster     = 1
	epService     = 2
	epProtocol    = 3
	epAddress     = 4
	epPort        = 5
	epNode        = 6
	epPriority    = 7
	epWeight      = 8
	epAnnotations = 9
	epTTL         = 10
	epTTLNever    = 11
	epInstanceID  = 12
	epRegion      = 13
	epZone        = 14
	epHealth      = 15

	listEndpoints = 1 // ListAllEndpointsResponse.endpoints
	listVersion   = 2 // ListAllEndpointsResponse.version
)

// maxDurationSeconds is google.protobuf.Duration's documented range (10,000 years).
const maxDurationSeconds = 315_576_000_000

var errTruncated = errors.New("truncated or malformed protobuf")

// wireDecoder decodes a run of endpoints in wire form (a listing, or a part of one).
// It shares the strings that repeat between them; its table of them is cleared when
// it goes back to the pool, so that no listing keeps another's strings alive.
type wireDecoder struct {
	strs map[string]string
	last [epHealth + 1]string // the last string of each field: often the next one too
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
	d.last = [epHealth + 1]string{}
	decoders.Put(d)
}

// parallelFrom is the listing size from which decodeListing splits the work
// between goroutines: below it, starting them costs more than it saves.
const parallelFrom = 4096

// decodeListing decodes a ListAllEndpointsResponse. A large one is decoded in
// parts at once, one per core (up to four), each part into its own range of the
// result: the client decodes while nothing else is left to do for the call.
func decodeListing(b []byte) ([]endpoint.Endpoint, string, error) {
	n := countFields(b, listEndpoints)
	eps := make([]endpoint.Endpoint, n)
	parts := splitListing(b, n, min(runtime.GOMAXPROCS(0), 4))
	var wg sync.WaitGroup
	for i := range parts {
		p := &parts[i]
		if i == len(parts)-1 {
			p.decode(eps) // on this goroutine
			continue
		}
		wg.Go(func() { p.decode(eps) })
	}
	wg.Wait()
	version := ""
	for _, p := range parts {
		if p.err != nil {
			return nil, "", fmt.Errorf("list response: %w", p.err)
		}
		if p.hasVersion { // protobuf keeps the last one
			version = p.version
		}
	}
	return eps, version, nil
}

// listingPart is a run of a listing's top-level fields and what decoding it found.
type listingPart struct {
	b          []byte
	first      int // the index of its first endpoint in the listing
	version    string
	hasVersion bool
	err        error
}

// splitListing cuts b, which holds n endpoints, into up to parts runs of fields
// holding about as many endpoints each: part k starts at endpoint k*n/parts.
func splitListing(b []byte, n, parts int) []listingPart {
	if n < parallelFrom || parts < 2 {
		return []listingPart{{b: b}}
	}
	out := make([]listingPart, 0, parts)
	start, seen, rest := 0, 0, b
	for len(rest) > 0 && len(out) < parts-1 {
		num, typ, _, next, err := nextField(rest)
		if err != nil {
			break // the last part meets the error and reports it
		}
		if num == listEndpoints && typ == protowire.BytesType {
			if seen == (len(out)+1)*n/parts {
				at := len(b) - len(rest)
				out = append(out, listingPart{b: b[start:at], first: len(out) * n / parts})
				start = at
			}
			seen++
		}
		rest = next
	}
	return append(out, listingPart{b: b[start:], first: len(out) * n / parts})
}

// decode decodes p's fields into eps from p.first on, with a decoder of its own
// (decoders are not safe for concurrent use).
func (p *listingPart) decode(eps []endpoint.Endpoint) {
	d := getWireDecoder(len(p.b))
	defer d.release()
	i, b := p.first, p.b
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			p.err = err
			return
		}
		b = rest
		switch {
		case num == listEndpoints && typ == protowire.BytesType:
			if err = d.endpoint(&eps[i], v); err != nil {
				p.err = fmt.Errorf("endpoint %d: %w", i, err)
				return
			}
			i++
		case num == listVersion && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				p.err = errors.New("version is not valid UTF-8")
				return
			}
			p.version, p.hasVersion = string(v), true
		}
	}
	d.addresses(eps[p.first:i])
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
	var ttl durationFields
	never := false
	var address []byte
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if num == epAddress && typ == protowire.BytesType { // the last one counts
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

func (d *wireDecoder) endpointField(e *endpoint.Endpoint, ttl *durationFields, never *bool, num protowire.Number, typ protowire.Type, v []byte) error {
	if typ == protowire.VarintType {
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case epPort:
			e.Port = int(uint32(x))
		case epPriority:
			e.Priority = int(uint32(x))
		case epWeight:
			e.Weight = int(uint32(x))
		case epTTLNever:
			*never = x != 0
		case epHealth:
			e.Health = endpoint.HealthFromWire(int32(x))
		}
		return nil
	}
	if typ != protowire.BytesType {
		return nil
	}
	var err error
	switch num {
	case epCluster:
		e.Cluster, err = d.field(epCluster, "cluster", v)
	case epService:
		e.Service, err = d.field(epService, "service", v)
	case epProtocol:
		e.Protocol, err = d.field(epProtocol, "protocol", v)
	case epNode:
		e.Node, err = d.field(epNode, "node", v)
	case epRegion:
		e.Region, err = d.field(epRegion, "region", v)
	case epZone:
		e.Zone, err = d.field(epZone, "zone", v)
	case epInstanceID: // recomputed from the key, never kept
		if !utf8.Valid(v) {
			err = errors.New("instance_id is not valid UTF-8")
		}
	case epAnnotations:
		err = d.annotation(e, v)
	case epTTL:
		err = ttl.merge(v)
	}
	return err
}

// annotation decodes one map entry (key 1, value 2; a missing one is empty).
func (d *wireDecoder) annotation(e *endpoint.Endpoint, b []byte) error {
	var k, val string
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return fmt.Errorf("annotations: %w", err)
		}
		b = rest
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			continue
		}
		s, err := d.str("annotation", v)
		if err != nil {
			return err
		}
		if num == 1 {
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

// durationFields is a google.protobuf.Duration being decoded; repeated occurrences
// merge field by field, as protobuf merges a repeated message field.
type durationFields struct {
	set            bool
	seconds, nanos int64
}

func (t *durationFields) merge(b []byte) error {
	t.set = true
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return fmt.Errorf("ttl: %w", err)
		}
		b = rest
		if typ != protowire.VarintType {
			continue
		}
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case 1:
			t.seconds = int64(x)
		case 2:
			t.nanos = int64(int32(x))
		}
	}
	return nil
}

// setTTL applies ttl and ttl_never as endpoint.FromProtoUnchecked does, with
// durationpb's validity rules.
func setTTL(e *endpoint.Endpoint, ttl durationFields, never bool) error {
	switch {
	case never:
		e.TTL = endpoint.Never
	case ttl.set:
		if !validDuration(ttl.seconds, ttl.nanos) {
			return &endpoint.FieldError{Field: "ttl", Value: fmt.Sprintf("%ds %dns", ttl.seconds, ttl.nanos), Rule: "is not a valid duration"}
		}
		e.TTL = endpoint.TTL(durationOf(ttl.seconds, ttl.nanos))
		if e.TTL <= 0 {
			return &endpoint.FieldError{Field: "ttl", Value: e.TTL.String(), Rule: "must be positive (use ttl_never)"}
		}
	}
	return nil
}

func validDuration(sec, nanos int64) bool {
	switch {
	case sec < -maxDurationSeconds || sec > maxDurationSeconds:
		return false
	case nanos <= -1e9 || nanos >= 1e9:
		return false
	case (sec > 0 && nanos < 0) || (sec < 0 && nanos > 0):
		return false
	}
	return true
}

// durationOf is durationpb's AsDuration: saturated at time.Duration's range.
func durationOf(sec, nanos int64) time.Duration {
	d := time.Duration(sec) * time.Second
	if d/time.Second != time.Duration(sec) {
		if sec < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	sum := d + time.Duration(nanos)
	if (nanos > 0 && sum < d) || (nanos < 0 && sum > d) {
		if nanos < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return sum
}

// countFields counts the length-delimited fields numbered num in b, to size the
// slice they are decoded into; it stops at the first malformed field.
func countFields(b []byte, num protowire.Number) int {
	n := 0
	for len(b) > 0 {
		got, typ, _, rest, err := nextField(b)
		if err != nil {
			break
		}
		if got == num && typ == protowire.BytesType {
			n++
		}
		b = rest
	}
	return n
}

// nextField splits off the first field of b: its number, wire type and value (a
// varint's encoding, or a length-delimited field's contents). Groups and other
// wire types are skipped whole, as protobuf skips unknown fields.
func nextField(b []byte) (protowire.Number, protowire.Type, []byte, []byte, error) {
	// Every field of these messages has a one-byte tag, and most values are short:
	// take those without protowire's general decoding.
	if len(b) >= 2 && b[0] < 0x80 && b[0] >= 1<<3 && b[1] < 0x80 {
		num, typ := protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch {
		case typ == protowire.BytesType && 2+int(b[1]) <= len(b):
			return num, typ, b[2 : 2+int(b[1])], b[2+int(b[1]):], nil
		case typ == protowire.VarintType:
			return num, typ, b[1:2], b[2:], nil
		}
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > protowire.MaxValidNumber {
		return 0, 0, nil, nil, errTruncated
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return 0, 0, nil, nil, errTruncated
		}
		return num, typ, v, b[m:], nil
	}
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, nil, errTruncated
	}
	return num, typ, b[:m], b[m:], nil
}
