package client

import (
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// cache is the agent's copy of the registrar's snapshot (base), with this client's
// own writes overlaid until the stream reflects them. What readers and watchers see
// (the view) is kept per service as a map plus a sorted slice, rebuilt lazily after
// a change, so a read of a service is a map lookup returning a shared slice.
//
// Its jobs live in a file each, all under mu: applying the stream's snapshots and
// events to base (snapshot.go), remembering this client's writes until they are
// persisted (ledger.go), the indexed view readers and watchers see (readcache.go),
// and where the cache stands with the stream (stream.go) and with a scoped
// client's sets of services (scope.go).
type cache struct {
	mu   sync.RWMutex
	base map[endpoint.Key]endpoint.Endpoint // the registrar's state, as the stream brought it
	ledger
	readCache
	position
	watchers map[*watcher]struct{}
	now      func() time.Time

	// covered is the set of services base holds (nil: all); scopes maps the ids
	// of the sets a scoped client asked for to the sets (scope.go).
	covered   map[string]struct{}
	coveredID uint64
	scopes    map[uint64]map[string]struct{}
	lastScope uint64
}

// newCache returns an empty cache, not ready, whose clock is now.
func newCache(now func() time.Time) *cache {
	c := &cache{
		base:      map[endpoint.Key]endpoint.Endpoint{},
		ledger:    ledger{own: map[endpoint.Key]*ownWrite{}},
		readCache: readCache{svcs: map[string]*service{}},
		watchers:  map[*watcher]struct{}{},
		scopes:    map[uint64]map[string]struct{}{},
		now:       now,
	}
	c.readyCh = make(chan struct{})
	c.lastGood = now()
	c.currentSince = c.lastGood
	return c
}
