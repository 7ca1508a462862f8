package jetstream

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Read liberally, write strictly: Apply validates every entry as package endpoint
// does, but a reader keeps every entry another compliant writer (CCM) may produce that
// can be used — an annotation key Switchboard would not write, a fractional TTL, a
// null port — and drops only what cannot be used.

// looseTTL reads a payload TTL: "never", a Go duration cut down to whole seconds
// (at least one), or unset for "" and null. A number is nanoseconds, as a Go
// time.Duration marshals: CCM writes and reads that form too.
type looseTTL endpoint.TTL

func (t *looseTTL) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = 0
		return nil
	}
	var ns float64
	if err := json.Unmarshal(b, &ns); err == nil {
		switch {
		case ns == 0:
			*t = 0
			return nil
		case ns < 0 || ns > float64(1<<62):
			return fmt.Errorf("ttl %s: want a positive number of nanoseconds", b)
		}
		*t = looseTTL(wholeSeconds(time.Duration(ns)))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("ttl: want a string or a number of nanoseconds, got %s", b)
	}
	v, err := parseLooseTTL(s)
	*t = looseTTL(v)
	return err
}

// wholeSeconds cuts d > 0 down to whole seconds, at least one. nats-server keeps a
// Nats-TTL in whole seconds, cut down (1.5s lives 1s), and refuses one under a
// second; a payload's TTL is read as the header written with it would live.
func wholeSeconds(d time.Duration) time.Duration {
	return max(d.Truncate(time.Second), time.Second)
}

func parseLooseTTL(s string) (endpoint.TTL, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return 0, nil
	case "never":
		return endpoint.Never, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl %q: want a positive duration or \"never\"", s)
	}
	return endpoint.TTL(wholeSeconds(d)), nil
}

// loosePayload is the JSON payload as read: endpoint's field names, with null allowed
// wherever a value may be missing.
type loosePayload struct {
	Cluster     string            `json:"cluster"`
	Service     string            `json:"service"`
	Protocol    string            `json:"protocol"`
	Address     string            `json:"address"`
	Port        *int              `json:"port"`
	Node        string            `json:"node"`
	Priority    int               `json:"priority"`
	Weight      int               `json:"weight"`
	Annotations map[string]string `json:"annotations"`
	TTL         looseTTL          `json:"ttl"`
}

// decodeLoose is the encoding/json path of decodeJSON.
func decodeLoose(data []byte) (endpoint.Endpoint, error) {
	var p loosePayload
	if err := json.Unmarshal(data, &p); err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("endpoint JSON: %w", err)
	}
	e := endpoint.Endpoint{Cluster: p.Cluster, Service: p.Service, Protocol: p.Protocol, Address: p.Address,
		Node: p.Node, Priority: p.Priority, Weight: p.Weight, Annotations: p.Annotations, TTL: endpoint.TTL(p.TTL)}
	if p.Port != nil {
		e.Port = *p.Port
	}
	liftLocality(&e)
	err := validForRead(&e)
	return e, err
}

// validForRead holds a read entry to the rules that make it usable: the endpoint
// read rules (ValidateRead), except that annotation keys may be anything and values
// any valid UTF-8, and that the address may be spelled any way (validButAnnotations),
// which puts it in canonical form.
func validForRead(e *endpoint.Endpoint) error {
	if err := validButAnnotations(e); err != nil {
		return err
	}
	for k, v := range e.Annotations {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return &endpoint.FieldError{Field: "annotations", Value: k, Rule: "keys and values must be valid UTF-8"}
		}
	}
	return nil
}

// validButAnnotations is validForRead without looking at the annotations. An IPv6
// address another writer kept as it was written (2001:DB8::1, 2001:0db8:0:0::1) is put
// in canonical form, so that every reader holds one key for one address: only once
// the endpoint rules have refused it, so the entries whose address is canonical,
// nearly all of them, pay nothing more.
func validButAnnotations(e *endpoint.Endpoint) error {
	v := *e
	v.Annotations = nil
	err := v.ValidateRead()
	if err == nil || !strings.Contains(v.Address, ":") {
		return err
	}
	v.Normalize()
	if v.Address == e.Address {
		return err // canonical already, or not an address: another rule is broken
	}
	if err := v.ValidateRead(); err != nil {
		return err
	}
	e.Address = v.Address
	return nil
}
