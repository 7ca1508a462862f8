package store

import "fmt"

// LinkStatus is a link's place in the link state machine.
type LinkStatus uint8

const (
	// LinkPending: desired, not yet sent to the source node.
	LinkPending LinkStatus = iota + 1
	// LinkConnecting: the create was sent to the source node. The link reconciler sets it
	// before sending, since only a Connecting link can become Failed.
	LinkConnecting
	// LinkApplied: the connection is up (acknowledged or claimed).
	LinkApplied
	// LinkFailed: the source node reported an error.
	LinkFailed
	// LinkDeleted: marked for deletion; the next step is a hard delete.
	LinkDeleted
)

var linkStatusNames = [...]string{"", "pending", "connecting", "applied", "failed", "deleted"}

func (s LinkStatus) String() string {
	if int(s) < len(linkStatusNames) && s != 0 {
		return linkStatusNames[s]
	}
	return fmt.Sprintf("LinkStatus(%d)", uint8(s))
}

// ParseLinkStatus is the inverse of String.
func ParseLinkStatus(s string) (LinkStatus, error) {
	for i, n := range linkStatusNames {
		if i > 0 && n == s {
			return LinkStatus(i), nil
		}
	}
	return 0, fmt.Errorf("unknown link status %q", s)
}

// linkFrom lists, for each target status, the statuses a link may move to it from.
// It is the spec's machine plus what its prose requires: any live status may go back to
// Pending (failover, endpoint change, re-registration), a Failed link is retried, a link
// the data plane reports alive is Applied whatever the CP last thought, and any live
// link can be marked deleted (the last node of a group leaving soft-deletes Applied
// links). Nothing leaves Deleted except the hard delete.
var linkFrom = map[LinkStatus][]LinkStatus{
	LinkPending:    {LinkPending, LinkConnecting, LinkApplied, LinkFailed},
	LinkConnecting: {LinkPending, LinkConnecting, LinkFailed},
	LinkApplied:    {LinkPending, LinkConnecting, LinkApplied, LinkFailed},
	LinkFailed:     {LinkConnecting, LinkFailed},
	LinkDeleted:    {LinkPending, LinkConnecting, LinkApplied, LinkFailed},
}

// LinkAdopted is the status message of a link the control plane adopted when a node
// registered again naming it, after it had marked the link deleted while both ends
// were cut off from it (a partition, not a crash). It is cleared when the link's far
// end registers again (or the link is moved or deleted first); the route reconciler
// reads it.
const LinkAdopted = "adopted after a partition of the control plane"

// LinkTransitionAllowed reports whether a link may move from one status to another.
func LinkTransitionAllowed(from, to LinkStatus) bool {
	for _, f := range linkFrom[to] {
		if f == from {
			return true
		}
	}
	return false
}

// RouteStatus is a route's place in the route state machine.
type RouteStatus uint8

const (
	// RoutePending: desired, not yet confirmed on the node.
	RoutePending RouteStatus = iota + 1
	// RouteApplied: the subscription is active on the node (templates are stored Applied).
	RouteApplied
	// RouteFailed: the node reported an error.
	RouteFailed
	// RouteDeleted: marked for deletion; the next step is a hard delete.
	RouteDeleted
)

var routeStatusNames = [...]string{"", "pending", "applied", "failed", "deleted"}

func (s RouteStatus) String() string {
	if int(s) < len(routeStatusNames) && s != 0 {
		return routeStatusNames[s]
	}
	return fmt.Sprintf("RouteStatus(%d)", uint8(s))
}

// ParseRouteStatus is the inverse of String.
func ParseRouteStatus(s string) (RouteStatus, error) {
	for i, n := range routeStatusNames {
		if i > 0 && n == s {
			return RouteStatus(i), nil
		}
	}
	return 0, fmt.Errorf("unknown route status %q", s)
}

// routeFrom is the spec's route machine plus: an Applied route goes back to Pending when
// its link is reset or it moves to a new gateway, and any live route can be marked
// deleted. A Failed route reaches Applied only through Pending (re-enqueued).
var routeFrom = map[RouteStatus][]RouteStatus{
	RoutePending: {RoutePending, RouteApplied, RouteFailed},
	RouteApplied: {RoutePending, RouteApplied},
	RouteFailed:  {RoutePending, RouteFailed},
	RouteDeleted: {RoutePending, RouteApplied, RouteFailed},
}

// RouteTransitionAllowed reports whether a route may move from one status to another.
func RouteTransitionAllowed(from, to RouteStatus) bool {
	for _, f := range routeFrom[to] {
		if f == from {
			return true
		}
	}
	return false
}
