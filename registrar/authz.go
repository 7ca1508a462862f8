package registrar

import (
	"context"
	"crypto/x509"
	"fmt"
	"regexp"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// DefaultNodePattern takes an agent's node from its identity: the last path
// segment of a SPIFFE ID (spiffe://example.org/agent/node-1 → node-1), or the whole
// DNS name or common name.
const DefaultNodePattern = `(?P<node>[^/]+)$`

// Authorizer decides what a caller may write. By default an identity may write
// only endpoints of its own node, the node its identity names (NodePattern); a
// policy grants identities whole services or clusters, for platform tooling.
// Unregistering and overwriting follow the same rule as registering: the node
// that owns an endpoint now is the one that may change it.
type Authorizer struct {
	from        IdentitySource
	trustDomain spiffeid.TrustDomain
	node        *regexp.Regexp
	policy      *Policy
}

// AuthorizerConfig configures an Authorizer.
type AuthorizerConfig struct {
	// IdentityFrom is the part of a client certificate that is its identity; empty
	// is IdentitySPIFFE.
	IdentityFrom IdentitySource
	// TrustDomain (e.g. "example.org") is the one whose SPIFFE IDs are identities;
	// required with IdentitySPIFFE, since any other trust domain the CA signs for
	// could otherwise name the same nodes.
	TrustDomain string
	// NodePattern is a regular expression with a group named "node" that takes an
	// identity's node (empty: DefaultNodePattern).
	NodePattern string
	// Policy grants identities more than their own node; nil grants nothing.
	Policy *Policy
}

// NewAuthorizer builds an Authorizer.
func NewAuthorizer(cfg AuthorizerConfig) (*Authorizer, error) {
	from, err := ParseIdentitySource(string(cfg.IdentityFrom))
	if err != nil {
		return nil, err
	}
	a := &Authorizer{from: from, policy: cfg.Policy}
	if from == IdentitySPIFFE {
		if a.trustDomain, err = spiffeid.TrustDomainFromString(cfg.TrustDomain); err != nil {
			return nil, fmt.Errorf("identities from SPIFFE IDs need the trust domain they belong to: %q: %w", cfg.TrustDomain, err)
		}
	}
	if a.node, err = compileNodePattern(cfg.NodePattern); err != nil {
		return nil, err
	}
	if a.policy == nil {
		a.policy = &Policy{}
	}
	return a, nil
}

func compileNodePattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		pattern = DefaultNodePattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("node identity pattern %q: %w", pattern, err)
	}
	if re.SubexpIndex("node") < 0 {
		return nil, fmt.Errorf("node identity pattern %q: needs a group named node, as in (?P<node>…)", pattern)
	}
	return re, nil
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

// peerCert is the client certificate the TLS handshake verified; ok is false when
// the connection carries none.
func peerCert(ctx context.Context) (cert *x509.Certificate, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.PeerCertificates) == 0 {
		return nil, false
	}
	return info.State.PeerCertificates[0], true
}

// callerOf is who makes a call: its identity ("" when its certificate names none
// the authorizer accepts) and node. ok is false without a client certificate.
func (a *Authorizer) callerOf(ctx context.Context) (w caller, ok bool) {
	cert, ok := peerCert(ctx)
	if !ok {
		return caller{}, false
	}
	id := a.identityOf(cert)
	return caller{identity: id, node: a.nodeOf(id)}, true
}
