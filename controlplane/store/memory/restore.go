package memory

import (
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Contents is every record of a store as another store persisted it, for Restore.
type Contents struct {
	Nodes    []store.Node
	Links    []store.Link
	Routes   []store.Route
	Segments []store.Segment
	Secrets  map[string]string
	// LastRouteID is the highest route id ever handed out, so that ids are not reused
	// after the records are loaded (routes that were deleted leave no record of it).
	LastRouteID int64
}

// Restore returns a store holding c exactly — versions, times and route ids as they
// were. A store that persists elsewhere (etcd) keeps one of these as its cache and
// fills it from what it read, which the Store interface cannot do: it sets versions
// and ids itself.
func Restore(c Contents) *Store {
	s := New()
	// The times read back are UTC without a monotonic clock reading; the ones this store sets
	// from now on do not either, so that a record compares equal to itself read back.
	s.now = func() time.Time { return time.Now().UTC() }
	for _, n := range c.Nodes {
		s.nodes.put(cloneNode(n))
	}
	for _, l := range c.Links {
		s.links.put(l)
	}
	s.routes.nextID = c.LastRouteID
	for _, r := range c.Routes {
		s.routes.put(r, false)
		s.routes.nextID = max(s.routes.nextID, r.ID)
	}
	for _, seg := range c.Segments {
		links := make(map[store.SegmentLink]struct{}, len(seg.Links))
		for _, l := range seg.Links {
			links[store.NewSegmentLink(seg.Name, l.GroupA, l.GroupB)] = struct{}{}
		}
		s.segments[seg.Name] = links
	}
	for g, secret := range c.Secrets {
		s.secrets[g] = secret
	}
	return s
}
