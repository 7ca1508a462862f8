package manifest

import (
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

var entryKeys = []string{
	"cluster", "service", "protocol", "address", "port", "node", "priority", "weight", "annotations", "ttl", "checks",
	"region", "zone", "health",
}

// entry parses one entry and validates it: the endpoint as package endpoint does, each
// check as package check does.
func (p *parser) entry(n *yaml.Node, path string) (Entry, error) {
	n, err := p.resolve(n)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Line: n.Line}
	ep := &e.Endpoint
	ep.Priority = 1 // the default when absent; an explicit 0 is rejected below
	strs := map[string]*string{
		"cluster": &ep.Cluster, "service": &ep.Service, "protocol": &ep.Protocol,
		"address": &ep.Address, "node": &ep.Node,
	}
	ints := map[string]*int{"port": &ep.Port, "priority": &ep.Priority, "weight": &ep.Weight}
	err = p.fields(n, path, entryKeys, func(key string, v *yaml.Node) error {
		var err error
		at := path + "." + key
		switch {
		case strs[key] != nil:
			*strs[key], err = p.scalar(v, at)
		case ints[key] != nil:
			*ints[key], err = p.integer(v, at)
		case key == "annotations":
			ep.Annotations, err = p.stringMap(v, at)
		case key == "ttl":
			err = p.ttl(v, at, &ep.TTL)
		case key == "region":
			ep.Region, err = p.name(v, at, key)
		case key == "zone":
			ep.Zone, err = p.name(v, at, key)
		case key == "health":
			err = p.health(v, at, &ep.Health)
		case key == "checks":
			err = p.seq(v, at, func(i int, item *yaml.Node) error {
				s, err := p.check(item, fmt.Sprintf("%s[%d]", at, i))
				e.Checks = append(e.Checks, s)
				return err
			})
		}
		return err
	})
	if err != nil {
		return Entry{}, err
	}
	ep.Normalize()
	if err := ep.Validate(); err != nil {
		return Entry{}, &Error{Line: e.Line, Path: path, Err: err}
	}
	return e, nil
}

func (p *parser) ttl(n *yaml.Node, path string, t *endpoint.TTL) error {
	s, err := p.scalar(n, path)
	if err != nil {
		return err
	}
	if *t, err = endpoint.ParseTTL(s); err != nil {
		return &Error{Line: n.Line, Column: n.Column, Path: path, Err: err}
	}
	return nil
}

// name parses an optional name (region, zone), checked here rather than by
// Validate so that the error points at the value, not at the entry.
func (p *parser) name(n *yaml.Node, path, field string) (string, error) {
	s, err := p.scalar(n, path)
	if err != nil || s == "" {
		return s, err
	}
	if err := endpoint.ValidateName(field, s); err != nil {
		return "", &Error{Line: n.Line, Column: n.Column, Path: path, Err: err}
	}
	return s, nil
}

// health parses a hand-set health state: an entry published as draining or
// unhealthy stays registered (its checks still gate it) but takes no new work.
func (p *parser) health(n *yaml.Node, path string, h *endpoint.Health) error {
	s, err := p.scalar(n, path)
	if err != nil {
		return err
	}
	if *h, err = endpoint.ParseHealth(s); err != nil {
		return &Error{Line: n.Line, Column: n.Column, Path: path, Err: err}
	}
	return nil
}

var checkKeys = []string{
	"http", "tcp", "grpc", "exec", "expect_status", "expect_body", "grpc_service", "interval", "timeout", "rise", "fall",
}

func (p *parser) check(n *yaml.Node, path string) (check.Spec, error) {
	n, err := p.resolve(n)
	if err != nil {
		return check.Spec{}, err
	}
	var s check.Spec
	kinds := 0
	err = p.fields(n, path, checkKeys, func(key string, v *yaml.Node) error {
		at := path + "." + key
		var err error
		switch key {
		case "http", "tcp", "grpc":
			kinds++
			s.Kind = check.Kind(key)
			s.Target, err = p.scalar(v, at)
		case "exec":
			kinds++
			s.Kind = check.Exec
			s.Argv, err = p.stringList(v, at)
		case "expect_status":
			s.ExpectStatus, err = p.integer(v, at)
		case "expect_body":
			s.ExpectBody, err = p.scalar(v, at)
		case "grpc_service":
			s.GRPCService, err = p.scalar(v, at)
		case "interval":
			s.Interval, err = p.duration(v, at)
		case "timeout":
			s.Timeout, err = p.duration(v, at)
		case "rise":
			s.Rise, err = p.positive(v, at)
		case "fall":
			s.Fall, err = p.positive(v, at)
		}
		return err
	})
	if err != nil {
		return check.Spec{}, err
	}
	if kinds != 1 {
		return check.Spec{}, &Error{Line: n.Line, Column: n.Column, Path: path, Err: errors.New("want exactly one of http, tcp, grpc, exec")}
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return check.Spec{}, &Error{Line: n.Line, Column: n.Column, Path: path, Err: err}
	}
	return s, nil
}

// positive parses a threshold; 0 is rejected here because WithDefaults would read it
// as "unset".
func (p *parser) positive(n *yaml.Node, path string) (int, error) {
	v, err := p.integer(n, path)
	if err == nil && v < 1 {
		err = &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("%d: must be at least 1", v)}
	}
	return v, err
}
