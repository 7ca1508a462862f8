package client

import (
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A scoped client (Options.Scoped) holds only the services someone asked for: the
// ones its watches name and the ones it writes. The registrar sends just those on a
// WatchEndpointsScoped stream, and every change of the set goes to the registrar on
// the same stream, answered by a snapshot of the new set. An agent that renders ten
// services of a 100,000-endpoint fleet thus holds ten services, not the fleet.

// interest is what the client's users need: a count of watches per service, the
// watches of every service, and the services this client wrote (kept for its life:
// an agent writes a handful, and its write bookkeeping compares them with the
// stream).
type interest struct {
	watches map[string]int
	wide    int // watches of every service: the set is then "all"
	written map[string]struct{}
}

func newInterest() interest {
	return interest{watches: map[string]int{}, written: map[string]struct{}{}}
}

// set returns the services needed, nil for all.
func (in *interest) set() map[string]struct{} {
	if in.wide > 0 {
		return nil
	}
	out := make(map[string]struct{}, len(in.watches)+len(in.written))
	for s := range in.watches {
		out[s] = struct{}{}
	}
	for s := range in.written {
		out[s] = struct{}{}
	}
	return out
}

// covers reports whether a cache holding the services of set (nil: all) has every
// endpoint f can match.
func covers(set map[string]struct{}, f endpoint.Filter) bool {
	if set == nil {
		return true
	}
	if endpoint.Any(f.Service) {
		return false
	}
	_, ok := set[f.Service]
	return ok
}

func sameSet(a, b map[string]struct{}) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return maps.Equal(a, b)
}

func names(set map[string]struct{}) []string {
	return slices.Sorted(maps.Keys(set))
}

// watched records a new watch with filter f. Callers hold c.cache.mu, the lock
// the set is computed under, so a set sent after the watch began includes it.
func (c *driver) watched(f endpoint.Filter) {
	switch {
	case !c.opts.Scoped:
	case endpoint.Any(f.Service):
		c.interest.wide++
	default:
		c.interest.watches[f.Service]++
	}
}

// unwatched forgets a watch with filter f. Callers hold c.cache.mu.
func (c *driver) unwatched(f endpoint.Filter) {
	switch {
	case !c.opts.Scoped:
	case endpoint.Any(f.Service):
		c.interest.wide--
	default:
		if c.interest.watches[f.Service]--; c.interest.watches[f.Service] <= 0 {
			delete(c.interest.watches, f.Service)
		}
	}
}

// wroteServices adds the services of ops to the set.
func (c *driver) wroteServices(ops []registry.Op) {
	if !c.opts.Scoped {
		return
	}
	grew := false
	c.cache.mu.Lock()
	for _, op := range ops {
		if _, ok := c.interest.written[op.Endpoint.Service]; !ok {
			c.interest.written[op.Endpoint.Service] = struct{}{}
			grew = true
		}
	}
	c.cache.mu.Unlock()
	if grew {
		c.kickScope()
	}
}

// kickScope tells the stream that the set may have changed.
func (c *driver) kickScope() {
	select {
	case c.scopeKick <- struct{}{}:
	default:
	}
}

// newScope names a set of services the client asks the registrar for. Callers
// hold c.mu.
func (c *cache) newScope(set map[string]struct{}) uint64 {
	c.lastScope++
	c.scopes[c.lastScope] = set
	return c.lastScope
}

// settled reports whether the cache holds every endpoint f can match and will go
// on holding them: no set asked for since the one it holds leaves f's service out.
// A watch starts only then, so that it never sees a service vanish and return
// while the sets change. Callers hold c.mu.
func (c *cache) settled(f endpoint.Filter) bool {
	if !covers(c.covered, f) {
		return false
	}
	for id, set := range c.scopes {
		if id > c.coveredID && !covers(set, f) {
			return false
		}
	}
	return true
}

// scopeSet is the set a snapshot ending with scopeID holds: every service for an
// unscoped stream (id 0). Earlier ids are forgotten: the registrar answers the
// sets in the order they were sent. Callers hold c.mu.
func (c *cache) scopeSet(id uint64) map[string]struct{} {
	if id == 0 {
		return nil
	}
	set := c.scopes[id]
	for k := range c.scopes {
		if k < id {
			delete(c.scopes, k)
		}
	}
	return set
}

// coveredScope returns the set base holds and an id for it, to resume a scoped
// stream from the cache's token; before the first snapshot it returns ok false.
func (c *cache) coveredScope() (set map[string]struct{}, id uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return nil, 0, false
	}
	return c.covered, c.newScope(c.covered), true
}
