package jetstream

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The endpoint JSON codec is the hot path of both Apply and List: encoding/json's
// reflection costs more per entry than the server does to store or send it. These
// are the same wire form (endpoint/json.go) written out by hand for the common case;
// anything unusual falls back to encoding/json, and fuzz tests hold both paths to the
// same bytes and the same endpoints. It would sit better in package endpoint.

// appendJSON appends e's payload, byte for byte what encoding/json writes for
// wireForm(e): e.MarshalJSON's form, with region, zone and health carried as reserved
// annotations (locality.go) instead of fields of their own.
func appendJSON(b []byte, e endpoint.Endpoint) []byte {
	b = append(b, `{"cluster":`...)
	b = appendString(b, e.Cluster)
	b = append(b, `,"service":`...)
	b = appendString(b, e.Service)
	b = append(b, `,"protocol":`...)
	b = appendString(b, e.Protocol)
	b = append(b, `,"address":`...)
	b = appendString(b, e.Address)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(e.Port), 10)
	if e.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, e.Node)
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(e.Priority), 10)
	if e.Weight != 0 {
		b = append(b, `,"weight":`...)
		b = strconv.AppendInt(b, int64(e.Weight), 10)
	}
	if l := localityOf(e); len(e.Annotations)+l.n > 0 {
		b = appendAnnotations(b, e.Annotations, &l)
	}
	if e.TTL != 0 {
		b = append(b, `,"ttl":`...)
		b = appendString(b, e.TTL.String())
	}
	return append(b, '}')
}

// appendAnnotations appends the annotations member: m merged with the reserved
// annotations l carries, which win over m's.
func appendAnnotations(b []byte, m map[string]string, l *localityAnn) []byte {
	keys := make([]string, 0, len(m)+l.n)
	for k := range m {
		if _, over := l.lookup(k); !over {
			keys = append(keys, k)
		}
	}
	keys = append(keys, l.keys[:l.n]...)
	slices.Sort(keys) // encoding/json sorts map keys
	b = append(b, `,"annotations":{`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		v, over := l.lookup(k)
		if !over {
			v = m[k]
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, v)
	}
	return append(b, '}')
}

// plainByte marks the bytes encoding/json writes as themselves inside a string: it
// escapes quotes, backslashes, controls and, by default, <, > and &.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			q, _ := json.Marshal(s) // escapes and invalid UTF-8 are its business
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeJSON parses and validates an endpoint payload as a reader does (loose.go):
// every entry endpoint.DecodeJSON accepts, and the usable ones it does not, with the
// reserved annotations lifted into region, zone and health (locality.go); top-level
// region, zone and health keys are not ours to read here, and ignored. in, when
// not nil, shares the strings that repeat across a read (cluster, service, node names)
// instead of allocating each again.
func decodeJSON(data []byte, in *interner) (endpoint.Endpoint, error) {
	e, ok := fastDecode(data, in)
	if !ok {
		e, err := decodeLoose(data)
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		return e, nil
	}
	liftLocality(&e)
	// fastDecode reads only printable ASCII, so the annotations are valid UTF-8:
	// walking the map again to check was a fifth of a cold decode.
	if err := validButAnnotations(&e); err != nil {
		return endpoint.Endpoint{}, err
	}
	return e, nil
}

// interner maps strings to one shared copy, up to a bound. It also remembers the
// string it last returned for each field: consecutive payloads mostly share their
// cluster, protocol and annotations, and comparing with the last one costs less than
// hashing for the map. A nil *interner shares nothing.
type interner struct {
	m    map[string]string
	last [lastSlots]string
}

// Slots of interner.last: the string fields, then annotation keys and values.
const (
	lastCluster = iota
	lastService
	lastProtocol
	lastNode
	lastAnnotationKey
	lastAnnotationValue
	lastTTL
	lastSlots
)

const (
	maxInterned    = 4096
	maxInternedLen = 64
)

func (in *interner) get(b []byte, slot int) string {
	if in == nil || len(b) > maxInternedLen {
		return string(b) // never kept, so not worth a look-up
	}
	if s := in.last[slot]; s == string(b) {
		return s
	}
	s, ok := in.m[string(b)]
	if !ok {
		s = string(b)
		if len(in.m) < maxInterned {
			if in.m == nil {
				in.m = map[string]string{}
			}
			in.m[s] = s
		}
	}
	in.last[slot] = s
	return s
}

// Field bits of the payload, for spotting duplicates.
const (
	fCluster uint16 = 1 << iota
	fService
	fProtocol
	fAddress
	fPort
	fNode
	fPriority
	fWeight
	fAnnotations
	fTTL
)

// fieldBit is a field's bit, 0 for an unknown name. A switch rather than a map: it
// runs for every field of every payload a cold lookup decodes, and hashing the name
// cost more than comparing it.
func fieldBit(name []byte) uint16 {
	switch string(name) {
	case "cluster":
		return fCluster
	case "service":
		return fService
	case "protocol":
		return fProtocol
	case "address":
		return fAddress
	case "port":
		return fPort
	case "node":
		return fNode
	case "priority":
		return fPriority
	case "weight":
		return fWeight
	case "annotations":
		return fAnnotations
	case "ttl":
		return fTTL
	}
	return 0
}

// fastDecode reads the common form of a payload — known fields once each, ASCII
// strings without escapes, plain integers — and reports false for anything else, which
// the caller hands to encoding/json.
func fastDecode(data []byte, in *interner) (endpoint.Endpoint, bool) {
	d := jsonReader{b: data, in: in}
	var e endpoint.Endpoint
	var seen uint16
	if !d.next('{') {
		return e, false
	}
	for first := true; ; first = false {
		if d.next('}') {
			break
		}
		if !first && !d.next(',') {
			return e, false
		}
		key, ok := d.raw()
		if !ok || !d.next(':') {
			return e, false
		}
		bit := fieldBit(key)
		if bit == 0 || seen&bit != 0 || !d.field(&e, bit) {
			return e, false
		}
		seen |= bit
	}
	d.space()
	return e, d.i == len(d.b)
}

type jsonReader struct {
	b  []byte
	i  int
	in *interner
}

func (d *jsonReader) field(e *endpoint.Endpoint, bit uint16) bool {
	var ok bool
	switch bit {
	case fCluster:
		e.Cluster, ok = d.str(lastCluster)
	case fService:
		e.Service, ok = d.str(lastService)
	case fProtocol:
		e.Protocol, ok = d.str(lastProtocol)
	case fNode:
		e.Node, ok = d.str(lastNode)
	case fAddress:
		var b []byte
		if b, ok = d.raw(); ok {
			e.Address = string(b) // unique per entry: not worth interning
		}
	case fPort:
		e.Port, ok = d.int()
	case fPriority:
		e.Priority, ok = d.int()
	case fWeight:
		e.Weight, ok = d.int()
	case fAnnotations:
		e.Annotations, ok = d.annotations()
	case fTTL:
		var s string
		if s, ok = d.str(lastTTL); ok {
			var err error
			e.TTL, err = parseLooseTTL(s)
			ok = err == nil
		}
	}
	return ok
}

func (d *jsonReader) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next consumes c (after whitespace) if it comes next.
func (d *jsonReader) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// raw reads a string of printable ASCII without escapes and returns its bytes, which
// alias the input.
func (d *jsonReader) raw() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) && rawByte[d.b[d.i]] { // one look-up a byte: raw was a tenth of a cold decode
		d.i++
	}
	if d.i == len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	d.i++
	return d.b[start : d.i-1], true
}

// rawByte marks the bytes raw takes as themselves: printable ASCII but the quote and
// the backslash.
var rawByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (d *jsonReader) str(slot int) (string, bool) {
	b, ok := d.raw()
	if !ok {
		return "", false
	}
	return d.in.get(b, slot), true
}

// int reads 0 or a positive integer without leading zeros, small enough for any
// field; signs, fractions and exponents go to encoding/json.
func (d *jsonReader) int() (int, bool) {
	d.space()
	start := d.i
	v := 0
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		v = v*10 + int(d.b[d.i]-'0')
		d.i++
	}
	n := d.i - start
	return v, n > 0 && n <= 9 && (n == 1 || d.b[start] != '0')
}

func (d *jsonReader) annotations() (map[string]string, bool) {
	if !d.next('{') {
		return nil, false
	}
	m := map[string]string{}
	for first := true; ; first = false {
		if d.next('}') {
			return m, true
		}
		if !first && !d.next(',') {
			return nil, false
		}
		k, ok := d.str(lastAnnotationKey)
		if !ok || !d.next(':') {
			return nil, false
		}
		v, ok := d.str(lastAnnotationValue)
		if _, dup := m[k]; !ok || dup {
			return nil, false
		}
		m[k] = v
	}
}
