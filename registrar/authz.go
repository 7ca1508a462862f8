package registrar

import (
	"context"
	"crypto/x509"
	"fmt"
	"regexp"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// DefaultNodePattern takes an agent's node from its identity: the last path
// segment of a SPIFFE ID or URI (spiffe://example.org/agent/node-1 → node-1), or
// the whole DNS name or common name.
const DefaultNodePattern = `(?P<node>[^/]+)$`

// Authorizer decides what a caller may write. By default an identity may write
// only endpoints of its own node, the node its identity names (NodePattern); a
// policy grants identities whole services or clusters, for platform tooling.
// Unregistering and overwriting follow the same rule as registering: the node
// that owns an endpoint now is the one that may change it.
type Authorizer struct {
	node   *regexp.Regexp
	policy *Policy
}

// NewAuthorizer builds an Authorizer. nodePattern is a regular expression with a
// group named "node" (empty: DefaultNodePattern); policy may be nil.
func NewAuthorizer(nodePattern string, policy *Policy) (*Authorizer, error) {
	if nodePattern == "" {
		nodePattern = DefaultNodePattern
	}
	re, err := regexp.Compile(nodePattern)
	if err != nil {
		return nil, fmt.Errorf("node identity pattern %q: %w", nodePattern, err)
	}
	if re.SubexpIndex("node") < 0 {
		return nil, fmt.Errorf("node identity pattern %q: needs a group named node, as in (?P<node>…)", nodePattern)
	}
	if policy == nil {
		policy = &Policy{}
	}
	return &Authorizer{node: re, policy: policy}, nil
}

// nodeOf is the node an identity may write for, "" when the pattern finds none.
func (a *Authorizer) nodeOf(identity string) string {
	m := a.node.FindStringSubmatch(identity)
	if m == nil {
		return ""
	}
	return m[a.node.SubexpIndex("node")]
}

// denial is a refused write: the rule that refused it, and why.
type denial struct {
	reason string // the metric's label
	msg    string
}

// caller is what the registrar knows of whoever makes a write.
type caller struct {
	identity string
	node     string
}

// check decides one op. cur is the endpoint its key holds now, if any.
func (a *Authorizer) check(w caller, op registry.Op, cur *endpoint.Endpoint) *denial {
	e := op.Endpoint
	if g := a.policy.grant(w.identity, e.Cluster, e.Service); g != "" {
		return nil // a grant covers the whole service or cluster, whoever owns the key
	}
	if w.node == "" {
		return &denial{reason: "no_node", msg: fmt.Sprintf("identity %q names no node (node identity pattern %q) and no policy grant covers service %q in cluster %q",
			w.identity, a.node.String(), e.Service, e.Cluster)}
	}
	if cur != nil && cur.Node != w.node {
		return &denial{reason: "owned_by_other_node", msg: fmt.Sprintf("%s belongs to node %q; identity %q may change endpoints of node %q only (rule: own node)",
			e.Key(), cur.Node, w.identity, w.node)}
	}
	if op.Kind == registry.OpRegister && e.Node != w.node {
		return &denial{reason: "other_node", msg: fmt.Sprintf("node %q: identity %q may register endpoints of node %q only (rule: own node)",
			e.Node, w.identity, w.node)}
	}
	return nil
}

// callerOf reads the caller's identity from its verified client certificate: the
// SPIFFE ID or first URI SAN, else the first DNS SAN, else the common name. ok is
// false when the connection carries no client certificate.
func callerOf(ctx context.Context) (identity string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return "", false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.PeerCertificates) == 0 {
		return "", false
	}
	return certIdentity(info.State.PeerCertificates[0]), true
}

func certIdentity(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}
