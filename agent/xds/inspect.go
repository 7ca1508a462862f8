package xds

import (
	"cmp"
	"slices"
	"time"
)

// Client is one open xDS stream as the agent's page shows it: read-only
// introspection, copied out of the tracker.
type Client struct {
	// Node is the client's node id; empty until a request names it.
	Node string
	// Delta says the stream is an incremental (delta) one, not state of the world;
	// Stream is its number among the streams of its kind (the two kinds are
	// numbered apart, each from 1).
	Delta  bool
	Stream int64
	// Since is when the stream made its first request.
	Since time.Time
	// Region and Zone are the locality its node named (the view it is served
	// from); empty when it named none.
	Region, Zone string
	// Types are the resource types the stream subscribed to, sorted.
	Types []Subscription
}

// Subscription is what one stream asked for of one resource type and what it was
// last sent.
type Subscription struct {
	// Type is the short type name: Cluster, ClusterLoadAssignment, Listener, …
	Type string
	// Wildcard is a subscription to every resource of the type; otherwise Names
	// counts those it named.
	Wildcard bool
	Names    int
	// Version is what the stream was last sent of the type (for a delta stream,
	// the system version); empty before the first response.
	Version string
}

// Clients returns the open streams, by node id, then SotW before delta, then
// stream number.
func (s *Server) Clients() []Client {
	t := s.track
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Client, 0, len(t.streams))
	for id, st := range t.streams {
		c := Client{Node: st.node, Delta: id.delta, Stream: id.id, Since: st.opened}
		if st.view != nil {
			c.Region, c.Zone = st.view.loc.region, st.view.loc.zone
		}
		for typ, sub := range st.subs {
			c.Types = append(c.Types, Subscription{Type: shortType(typ), Wildcard: sub.wildcard, Names: len(sub.names), Version: st.sent[typ]})
		}
		slices.SortFunc(c.Types, func(a, b Subscription) int { return cmp.Compare(a.Type, b.Type) })
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Client) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), boolCmp(a.Delta, b.Delta), cmp.Compare(a.Stream, b.Stream))
	})
	return out
}

// OnChange makes fn be called after what Clients returns may have changed: a stream
// opened, subscribed, was sent a response or closed. fn runs on the server's
// goroutines and must not block; nil stops the calls.
func (s *Server) OnChange(fn func()) {
	if fn == nil {
		s.track.notify.Store(nil)
		return
	}
	s.track.notify.Store(&fn)
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// sent records the version a stream was last sent of a type.
func (t *tracker) sent(id streamID, typeURL, version string) {
	t.mu.Lock()
	if s := t.streams[id]; s != nil {
		s.sent[typeURL] = version
	}
	t.mu.Unlock()
	t.poke()
}

// poke calls the OnChange function, if any.
func (t *tracker) poke() {
	if fn := t.notify.Load(); fn != nil {
		(*fn)()
	}
}
