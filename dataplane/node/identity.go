package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// Who is at the other end of a link or a peering. With a listener that verifies client
// certificates (mTLS), the dialer is who its certificate says: its SPIFFE ID, mapped to
// a group and a node id by Config.PeerIdentity. The stream's metadata may repeat that,
// nothing else. Without client certificates the node cannot tell dialers apart and
// takes their metadata as given.

// DefaultPeerIdentity maps spiffe://GROUP/.../NODE to node NODE of group GROUP: the
// trust domain is the group (as for SPIRE registration with the control plane) and the
// last path segment the node, so spiffe://cloud/node/n1 is cloud/n1.
const DefaultPeerIdentity = `^spiffe://(?P<group>[^/]+)/(?:.*/)?(?P<node>[^/]+)$`

// ParsePeerIdentity compiles a peer identity mapping: a regular expression matched
// against a peer's SPIFFE ID, with the named groups "group" and "node".
func ParsePeerIdentity(pattern string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("peer identity pattern %q: %w", pattern, err)
	}
	if err := checkPeerIdentity(re); err != nil {
		return nil, err
	}
	return re, nil
}

func checkPeerIdentity(re *regexp.Regexp) error {
	if re.SubexpIndex("group") < 0 || re.SubexpIndex("node") < 0 {
		return fmt.Errorf("peer identity pattern %q: needs the named groups (?P<group>...) and (?P<node>...)", re)
	}
	return nil
}

// Why a dialer was refused (the "reason" label of peer_identity_denied_total).
const (
	denyNoIdentity = "no_identity"       // no certificate, no SPIFFE ID, or one the mapping does not match
	denyMismatch   = "metadata_mismatch" // the metadata claims another node or group than the certificate
	denyLink       = "link_assignment"   // the link id is not one this dialer may present, or another group's node has none
	denyClient     = "client_group"      // a local client (publish, subscribe) of another group than the node's
)

// verifiesClients reports whether a listener with conf authenticates its clients: it
// verifies their certificates itself, or a callback does (as SPIFFE's, which requires
// any certificate and checks it against the trust bundle).
func verifiesClients(conf *tls.Config) bool {
	if conf == nil {
		return false
	}
	switch conf.ClientAuth {
	case tls.VerifyClientCertIfGiven, tls.RequireAndVerifyClientCert:
		return true
	case tls.RequestClientCert, tls.RequireAnyClientCert:
		return conf.VerifyPeerCertificate != nil
	}
	return false
}

// identity is a peer node as its certificate names it.
type identity struct {
	spiffeID, group, node string
}

// id is the node's effective id, "{group}/{node}".
func (p identity) id() string { return p.group + "/" + p.node }

// hello is what the dialer of a stream says about itself (checked, with mTLS).
type hello struct {
	linkID, node, group, endpoint string
	segments                      []string
	spiffeID                      string // what node and group were checked against; "" without mTLS
}

// identify reads the stream's metadata and, with mTLS, holds it against the dialer's
// certificate. A refusal is logged, counted and returned as the stream's status.
func (n *Node) identify(ctx context.Context) (hello, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := hello{
		linkID: first(md, mdLinkID), node: first(md, mdNode), group: first(md, mdGroup),
		endpoint: first(md, mdEndpoint), segments: md.Get(mdSegments),
	}
	if !n.peerAuth {
		if h.node == "" {
			return h, status.Error(codes.InvalidArgument, "link stream without the dialer's node id (metadata sb-node)")
		}
		return h, nil
	}
	id, err := n.certIdentity(ctx)
	h.spiffeID = id.spiffeID
	switch {
	case err != nil:
		return h, n.deny(ctx, h, denyNoIdentity, err.Error())
	case h.node != "" && h.node != id.id():
		return h, n.deny(ctx, h, denyMismatch, fmt.Sprintf("certificate %s is node %s, not %s (metadata %s)", id.spiffeID, id.id(), h.node, mdNode))
	case h.group != "" && h.group != id.group:
		return h, n.deny(ctx, h, denyMismatch, fmt.Sprintf("certificate %s is of group %s, not %s (metadata %s)", id.spiffeID, id.group, h.group, mdGroup))
	}
	h.node, h.group = id.id(), id.group
	return h, nil
}

// certIdentity maps the verified certificate the other end of a stream presented to a
// node. The SPIFFE ID is set whenever the certificate carries one.
func (n *Node) certIdentity(ctx context.Context) (identity, error) {
	p, _ := peer.FromContext(ctx)
	var certs []*x509.Certificate
	if p != nil {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			certs = info.State.PeerCertificates
		}
	}
	if len(certs) == 0 {
		return identity{}, errors.New("no certificate was presented")
	}
	return n.mapIdentity(certs[0])
}

// mapIdentity applies the peer identity mapping to cert's SPIFFE ID.
func (n *Node) mapIdentity(cert *x509.Certificate) (identity, error) {
	sid, err := x509svid.IDFromCert(cert)
	if err != nil {
		return identity{}, fmt.Errorf("the certificate carries no SPIFFE ID: %w", err)
	}
	id := identity{spiffeID: sid.String()}
	re := n.cfg.PeerIdentity
	m := re.FindStringSubmatch(id.spiffeID)
	if m != nil {
		id.group, id.node = m[re.SubexpIndex("group")], m[re.SubexpIndex("node")]
	}
	if id.group == "" || id.node == "" {
		return id, fmt.Errorf("SPIFFE ID %s names no group and node under the peer identity pattern %s", id.spiffeID, re)
	}
	return id, nil
}

// deny refuses a stream: PERMISSION_DENIED, a warning and a count.
func (n *Node) deny(ctx context.Context, h hello, reason, why string) error {
	n.metrics.identityDenied.WithLabelValues(reason).Inc()
	n.cfg.Logger.Warn("link stream refused", "node", n.id, "reason", reason, "why", why,
		"identity", h.spiffeID, "claimed_node", h.node, "claimed_group", h.group, "link", h.linkID, "peer", callerAddr(ctx))
	return status.Error(codes.PermissionDenied, why)
}

// The control plane tells a link's dialer where to dial, but not the node it dials
// who will come: the accepting node learns a link from its first stream. So, with
// mTLS, a link id is bound to the group of the first node that presents it, and only
// nodes of that group may present it afterwards (the control plane moves a link only to
// a sibling in its source group, when its gateway fails). The binding outlives the
// link's state, up to maxLinkOwners links per group: a group that presents id after id
// pushes out only its own oldest bindings, never another group's. A link id this node
// dials itself, or one presented by a node of this node's own group (which peers
// instead), is refused.
const maxLinkOwners = 4096

// linkOwners remembers the group each link id came from, the newest maxLinkOwners of
// each group.
type linkOwners struct {
	group map[string]string
	order map[string][]string // by group, oldest first
}

func (o *linkOwners) get(link string) (string, bool) {
	g, ok := o.group[link]
	return g, ok
}

func (o *linkOwners) bind(link, group string) {
	if o.group == nil {
		o.group, o.order = map[string]string{}, map[string][]string{}
	}
	if _, ok := o.group[link]; ok {
		return
	}
	if own := o.order[group]; len(own) == maxLinkOwners {
		delete(o.group, own[0])
		o.order[group] = own[1:]
	}
	o.group[link] = group
	o.order[group] = append(o.order[group], link)
}

// checkLinkLocked says why group may not present link, or binds link to it (nil).
// It checks nothing without mTLS. Callers hold n.mu.
func (n *Node) checkLinkLocked(link, group string) error {
	if !n.peerAuth {
		return nil
	}
	if group == n.cfg.Group {
		return fmt.Errorf("link %s: a node of this node's group %s peers, it does not link", link, group)
	}
	for _, c := range n.conns {
		if c.kind == linkOut && c.info().LinkID == link {
			return fmt.Errorf("link %s is dialled by this node", link)
		}
	}
	owner, ok := n.linkOwners.get(link)
	if c := n.inLinks[link]; c != nil {
		owner, ok = groupOf(c.remoteID()), true
	}
	if ok && owner != group {
		return fmt.Errorf("link %s comes from group %s, not %s", link, owner, group)
	}
	n.linkOwners.bind(link, group)
	return nil
}

// groupOf is the group of an effective node id.
func groupOf(id string) string {
	g, _, _ := strings.Cut(id, "/")
	return g
}

// Local clients publish with this node's origin and subscribe in its name (the node
// announces the name, and its group's traffic for it comes here). With mTLS, only
// certificates of the node's own group may use that API: the listener also accepts
// other groups' nodes, for links.

// clientService is the prefix of the client API's method names.
var clientService = "/" + nodev1.NodeService_ServiceDesc.ServiceName + "/"

func (n *Node) unaryClientCheck(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.checkClient(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (n *Node) streamClientCheck(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.checkClient(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// checkClient refuses a call of the client API from a certificate of another group, or
// one that names no group, with mTLS; it lets everything else through.
func (n *Node) checkClient(ctx context.Context, method string) error {
	if !n.peerAuth || !strings.HasPrefix(method, clientService) {
		return nil
	}
	id, err := n.certIdentity(ctx)
	switch {
	case err != nil:
		return n.denyClient(ctx, denyNoIdentity, id, err.Error())
	case id.group != n.cfg.Group:
		return n.denyClient(ctx, denyClient, id, fmt.Sprintf("certificate %s is of group %s: only group %s's clients may publish and subscribe at node %s", id.spiffeID, id.group, n.cfg.Group, n.id))
	}
	return nil
}

// denyClient refuses a client call: PERMISSION_DENIED, a warning and a count.
func (n *Node) denyClient(ctx context.Context, reason string, id identity, why string) error {
	n.metrics.identityDenied.WithLabelValues(reason).Inc()
	n.cfg.Logger.Warn("client refused", "node", n.id, "reason", reason, "why", why, "identity", id.spiffeID, "peer", callerAddr(ctx))
	return status.Error(codes.PermissionDenied, why)
}

// callerAddr is the address of the other end of ctx's call, for logs.
func callerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
