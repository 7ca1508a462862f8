package cloudmap

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Attribute names. The AWS_ ones are Cloud Map's own; the rest are ours.
const (
	attrIPv4        = "AWS_INSTANCE_IPV4"
	attrIPv6        = "AWS_INSTANCE_IPV6"
	attrPort        = "AWS_INSTANCE_PORT"
	attrCluster     = "cluster"
	attrService     = "service"
	attrProtocol    = "protocol"
	attrNode        = "node"
	attrPriority    = "priority"
	attrWeight      = "weight"
	attrTTL         = "ttl"
	attrExpiry      = "expiry" // unix milliseconds
	attrAnnotations = "annotations"
	attrRegion      = "region"
	attrZone        = "zone"
	attrHealth      = "health" // omitted when healthy; Cloud Map's own health status is not used
)

// Cloud Map's limits on an instance's attributes, in characters.
const (
	maxAttrValue = 1024
	maxAttrTotal = 5000
)

// encode turns an endpoint into instance attributes; now dates the expiry. An
// endpoint too large for Cloud Map fails with a FieldError naming annotations, the
// only field that can make it so.
func encode(e endpoint.Endpoint, now time.Time) (map[string]string, error) {
	a := map[string]string{
		attrCluster:  e.Cluster,
		attrService:  e.Service,
		attrProtocol: e.Protocol,
		attrPriority: strconv.Itoa(e.Priority),
	}
	if addr, err := netip.ParseAddr(e.Address); err == nil && addr.Is4() {
		a[attrIPv4] = e.Address
	} else {
		a[attrIPv6] = e.Address
	}
	if e.Port != 0 {
		a[attrPort] = strconv.Itoa(e.Port)
	}
	setIf(a, attrNode, e.Node)
	if e.Weight != 0 {
		a[attrWeight] = strconv.Itoa(e.Weight)
	}
	setIf(a, attrTTL, e.TTL.String())
	setIf(a, attrRegion, e.Region)
	setIf(a, attrZone, e.Zone)
	if e.Health != endpoint.Healthy {
		a[attrHealth] = e.Health.String()
	}
	if d := e.TTL.Duration(); d > 0 {
		a[attrExpiry] = strconv.FormatInt(now.Add(d).UnixMilli(), 10)
	}
	if len(e.Annotations) > 0 {
		js, err := json.Marshal(e.Annotations)
		if err != nil {
			return nil, fmt.Errorf("annotations: %w", err)
		}
		for i, chunk := range split(string(js), maxAttrValue) {
			a[chunkName(i)] = chunk
		}
	}
	if n := size(a); n > maxAttrTotal {
		return nil, &endpoint.FieldError{Field: "annotations", Value: fmt.Sprintf("%d entries", len(e.Annotations)),
			Rule: fmt.Sprintf("the endpoint needs %d characters of Cloud Map attributes; Cloud Map allows %d per instance", n, maxAttrTotal)}
	}
	return a, nil
}

func setIf(a map[string]string, k, v string) {
	if v != "" {
		a[k] = v
	}
}

func chunkName(i int) string {
	if i == 0 {
		return attrAnnotations
	}
	return attrAnnotations + "." + strconv.Itoa(i)
}

// split cuts s into pieces of at most n characters, never inside a character.
func split(s string, n int) []string {
	var out []string
	for s != "" {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, w := utf8.DecodeRuneInString(s[i:])
			i += w
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func size(a map[string]string) int {
	n := 0
	for k, v := range a {
		n += utf8.RuneCountInString(k) + utf8.RuneCountInString(v)
	}
	return n
}

// decoded is an instance read back: the endpoint, and when it expires (zero: never).
type decoded struct {
	ep     endpoint.Endpoint
	expiry time.Time
}

func (d decoded) expired(now time.Time) bool { return !d.expiry.IsZero() && !now.Before(d.expiry) }

// decode reads an instance's attributes back into an endpoint. It fails for
// instances that are not a valid endpoint stored under its own instance id, which is
// what instances registered by other tools look like.
func decode(id string, a map[string]string) (decoded, error) {
	e := endpoint.Endpoint{
		Cluster: a[attrCluster], Service: a[attrService], Protocol: a[attrProtocol], Node: a[attrNode],
		Address: a[attrIPv4], Region: a[attrRegion], Zone: a[attrZone], Health: decodeHealth(a),
	}
	if e.Address == "" {
		e.Address = a[attrIPv6]
	}
	var err error
	ints := []struct {
		name string
		dst  *int
	}{{attrPort, &e.Port}, {attrPriority, &e.Priority}, {attrWeight, &e.Weight}}
	for _, f := range ints {
		if v, ok := a[f.name]; ok {
			if *f.dst, err = strconv.Atoi(v); err != nil {
				return decoded{}, fmt.Errorf("attribute %s: %q is not an integer", f.name, v)
			}
		}
	}
	if e.TTL, err = endpoint.ParseTTL(a[attrTTL]); err != nil {
		return decoded{}, fmt.Errorf("attribute %s: %w", attrTTL, err)
	}
	if e.Annotations, err = decodeAnnotations(a); err != nil {
		return decoded{}, err
	}
	if err := e.ValidateRead(); err != nil {
		return decoded{}, err
	}
	if got := e.InstanceID(); got != id {
		return decoded{}, fmt.Errorf("instance id %q does not match its attributes (want %s)", id, got)
	}
	d := decoded{ep: e}
	if v, ok := a[attrExpiry]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return decoded{}, fmt.Errorf("attribute %s: %q is not unix milliseconds", attrExpiry, v)
		}
		d.expiry = time.UnixMilli(ms)
	}
	return d, nil
}

// decodeHealth reads the health attribute liberally: missing is Healthy (every
// instance written before the field existed), and a state this release does not know
// (a newer writer's) is Unhealthy, which routes nothing to the endpoint, rather than
// making the instance unreadable.
func decodeHealth(a map[string]string) endpoint.Health {
	h, err := endpoint.ParseHealth(a[attrHealth])
	if err != nil {
		return endpoint.Unhealthy
	}
	return h
}

func decodeAnnotations(a map[string]string) (map[string]string, error) {
	var b strings.Builder
	for i := 0; ; i++ {
		chunk, ok := a[chunkName(i)]
		if !ok {
			break
		}
		b.WriteString(chunk)
	}
	if b.Len() == 0 {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
		return nil, fmt.Errorf("attribute %s: %w", attrAnnotations, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
