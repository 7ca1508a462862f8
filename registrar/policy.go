package registrar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Policy widens what identities may do beyond writing their own node's endpoints
// (--write-policy FILE). Its YAML form:
//
//	grants:                      # identities that may write whole services or clusters
//	  - identity: spiffe://example.org/platform/deployer   # exact, or a prefix ending in *; or dns:NAME, cn:NAME
//	    services: [web, api]     # "*" for every service
//	    clusters: [east]         # optional; empty or "*" for every cluster
//	readers:                     # optional; who may list and watch (default: every authenticated identity)
//	  - spiffe://example.org/*
type Policy struct {
	Grants  []Grant  `yaml:"grants"`
	Readers []string `yaml:"readers"`
}

// Grant lets the identities matching Identity write every endpoint of Services in
// Clusters.
type Grant struct {
	Identity string   `yaml:"identity"`
	Services []string `yaml:"services"`
	Clusters []string `yaml:"clusters"`
}

// LoadPolicy reads and checks a policy file.
func LoadPolicy(path string) (*Policy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("write policy: %w", err)
	}
	p, err := ParsePolicy(raw)
	if err != nil {
		return nil, fmt.Errorf("write policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy decodes a policy strictly: unknown keys, empty identities, grants
// that name nothing and invalid names are errors that say where.
func ParsePolicy(raw []byte) (*Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty policy
		return nil, err
	}
	for i, g := range p.Grants {
		at := fmt.Sprintf("grants[%d]", i)
		if err := checkIdentityPattern(g.Identity); err != nil {
			return nil, fmt.Errorf("%s.identity: %w", at, err)
		}
		if len(g.Services) == 0 {
			return nil, fmt.Errorf("%s.services: list the services the identity may write, or \"*\" for all", at)
		}
		if err := checkNames(at+".services", "service", g.Services); err != nil {
			return nil, err
		}
		if err := checkNames(at+".clusters", "cluster", g.Clusters); err != nil {
			return nil, err
		}
	}
	for i, r := range p.Readers {
		if err := checkIdentityPattern(r); err != nil {
			return nil, fmt.Errorf("readers[%d]: %w", i, err)
		}
	}
	return &p, nil
}

func checkIdentityPattern(p string) error {
	switch {
	case p == "":
		return errors.New("empty: name an identity (spiffe://trust-domain/path, dns:NAME or cn:NAME), or a prefix ending in *")
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return fmt.Errorf("%q: * may only end a pattern", p)
	}
	return checkIdentityKind(p)
}

// checkIdentityKind refuses a pattern that no identity could match, such as a bare
// host name (identities are SPIFFE IDs, dns:NAME or cn:NAME) or a SPIFFE ID
// go-spiffe would not parse: such a grant would silently grant nothing.
func checkIdentityKind(p string) error {
	body, prefix := strings.CutSuffix(p, "*")
	switch {
	case p == "*":
		return nil
	case strings.HasPrefix(body, dnsPrefix), strings.HasPrefix(body, cnPrefix):
		if !prefix && (body == dnsPrefix || body == cnPrefix) {
			return fmt.Errorf("%q: names no one: add the name", p)
		}
		return nil
	case !strings.HasPrefix(body, "spiffe://"):
		return fmt.Errorf("%q: not an identity: write a SPIFFE ID (spiffe://trust-domain/path), dns:NAME or cn:NAME, or a prefix of one ending in *", p)
	}
	id := body
	if prefix {
		id += "x" // some ID the prefix begins must parse
	}
	if _, err := spiffeid.FromString(id); err != nil {
		return fmt.Errorf("%q: not a SPIFFE ID: %w", p, err)
	}
	return nil
}

func checkNames(at, field string, names []string) error {
	for j, n := range names {
		if n == "*" {
			continue
		}
		if err := endpoint.ValidateName(field, n); err != nil {
			return fmt.Errorf("%s[%d]: %w", at, j, err)
		}
	}
	return nil
}

// matches reports whether identity matches pattern: equal, or with the prefix
// before a final *.
func matches(pattern, identity string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(identity, prefix)
	}
	return pattern == identity
}

// grant returns the identity pattern of a grant that lets identity write service
// in cluster, "" if none does.
func (p *Policy) grant(identity, cluster, service string) string {
	for _, g := range p.Grants {
		if !matches(g.Identity, identity) {
			continue
		}
		if covers(g.Services, service) && (len(g.Clusters) == 0 || covers(g.Clusters, cluster)) {
			return g.Identity
		}
	}
	return ""
}

func covers(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// mayRead reports whether identity may list and watch.
func (p *Policy) mayRead(identity string) bool {
	if len(p.Readers) == 0 {
		return true
	}
	return slices.ContainsFunc(p.Readers, func(r string) bool { return matches(r, identity) })
}
