package store

import (
	"time"
)

// AllNodes is the source node id of a wildcard route template: "every reachable node
// should be able to reach this name".
const AllNodes = "*"

// ConnectionDetails is one server a data-plane node listens on.
type ConnectionDetails struct {
	// Endpoint is the address reachable inside the node's group.
	Endpoint string `json:"endpoint"`
	// ExternalEndpoint is the address other groups dial (often a shared ingress). Only a
	// node with one can be the destination of an inter-group link.
	ExternalEndpoint string `json:"external_endpoint,omitempty"`
	// MTLSRequired says clients must present a certificate.
	MTLSRequired bool `json:"mtls_required,omitempty"`
}

// Node is a registered data-plane node.
type Node struct {
	// ID is "{group}/{node_id}", or the bare node id for a node without a group.
	ID    string
	Group string
	// ConnDetails lists the node's servers as it reported them.
	ConnDetails []ConnectionDetails
	// Connected is false after a crash disconnect: the record is kept because the node is
	// expected to come back.
	Connected bool
	// Session counts registrations of this id, so a disconnect from an older stream can be
	// told apart from one of the current stream.
	Session     uint64
	LastUpdated time.Time
}

// ExternalEndpoint returns the first external endpoint the node reported, or "".
func (n Node) ExternalEndpoint() string {
	for _, cd := range n.ConnDetails {
		if cd.ExternalEndpoint != "" {
			return cd.ExternalEndpoint
		}
	}
	return ""
}

// Link is a desired connection from SourceNodeID to DestEndpoint. The destination node is
// only known once the node that received the connection claims it.
type Link struct {
	ID           string // UUID
	SourceNodeID string
	SourceGroup  string
	DestGroup    string
	// DestNodeID is filled by the claim: the node that actually received the connection,
	// which behind a shared ingress need not be TargetNodeID.
	DestNodeID string
	// TargetNodeID is the node whose external endpoint was chosen when the link was made.
	TargetNodeID  string
	DestEndpoint  string
	ConnConfig    string // JSON client configuration the source node dials with
	Status        LinkStatus
	StatusMessage string
	Deleted       bool
	LastUpdated   time.Time
	// Version is set by the store: 1 on create, one more on every update. Writes can be
	// made conditional on it (LinkUpdate.IfVersion, DeleteLinkIf).
	Version int64
}

// Involves reports whether the node is the link's source, its claimed destination, or
// the node it was made to target.
func (l Link) Involves(nodeID string) bool {
	return l.SourceNodeID == nodeID || l.DestNodeID == nodeID || l.TargetNodeID == nodeID
}

// Peer returns the group at the other end of the link from group g.
func (l Link) Peer(g string) string {
	if l.SourceGroup == g {
		return l.DestGroup
	}
	return l.SourceGroup
}

// Route is a desired subscription: SourceNodeID forwards messages for Name over LinkID.
// A route whose SourceNodeID is AllNodes is a wildcard template; its DestNodeID is the
// node that announced the name and it has no link.
type Route struct {
	ID            int64 // assigned by the store, increasing in creation order
	SourceNodeID  string
	DestNodeID    string
	LinkID        string
	Name          Name
	Status        RouteStatus
	StatusMessage string
	Deleted       bool
	LastUpdated   time.Time
	// Version is Link.Version for routes.
	Version int64
}

// IsTemplate reports whether the route is a wildcard template.
func (r Route) IsTemplate() bool { return r.SourceNodeID == AllNodes }

// Key is what makes a route unique. An expansion is one subscription on one node over
// one link, whoever it leads to; a template is one announcement by one node.
func (r Route) Key() string {
	if r.IsTemplate() {
		return AllNodes + "\x00" + r.DestNodeID + "\x00" + r.Name.String()
	}
	return r.SourceNodeID + "\x00" + r.LinkID + "\x00" + r.Name.String()
}

// Segment is a routing domain managed through the API.
type Segment struct {
	Name  string
	Links []SegmentLink
}

// SegmentLink is an undirected topology edge between two groups inside a segment.
// NewSegmentLink orders the groups so that one edge has one form.
type SegmentLink struct {
	Segment string
	GroupA  string
	GroupB  string
}

// NewSegmentLink returns the edge with its groups in order.
func NewSegmentLink(segment, a, b string) SegmentLink {
	if b < a {
		a, b = b, a
	}
	return SegmentLink{Segment: segment, GroupA: a, GroupB: b}
}
