package client

import (
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The stream's snapshots and events, applied to the cache's copy of the registrar's
// state (base): a change, a version that changed nothing, the end of a resumed
// replay, a full snapshot replacing the last. Each then brings the view in line
// (readcache.go) and lets the ledger retire and forget what the stream has caught
// up with (ledger.go).

// change applies one ADDED, UPDATED or REMOVED event of the stream.
func (c *cache) change(t registry.EventType, e endpoint.Endpoint, v, persisted token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := e.Key()
	if t == registry.Removed {
		delete(c.base, k)
	} else {
		c.base[k] = e
	}
	c.at = v
	c.refresh(k)
	c.retire()
	c.confirm(persisted)
}

// progressed applies a PROGRESS: a version with no change, whose frontier confirms
// writes that changed nothing anyone sees.
func (c *cache) progressed(v, persisted token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = v
	c.retire()
	c.confirm(persisted)
}

// resumed records a SNAPSHOT_COMPLETE after a replay: the cache is current at v.
// A resume into another epoch (the registrar found its state's digest equal to the
// token's, docs/registrar.md) is a move to a replica that may not have persisted
// what the last one accepted: as after a full snapshot in a new epoch, it returns
// the writes of this client the registrar lost, to be sent again.
func (c *cache) resumed(v, persisted token.Version, scopeID uint64) []ownRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	if scopeID != 0 {
		c.scopeSet(scopeID) // the set is the one the cache held
		c.coveredID = scopeID
	}
	newEpoch := c.at.Epoch != v.Epoch
	c.at = v
	var resend []ownRef
	if newEpoch {
		resend = c.reconcileOwn(true)
		for k := range c.own {
			c.refresh(k)
		}
	}
	c.retire()
	c.confirm(persisted)
	c.markCurrent()
	return resend
}

// replace installs a full snapshot taken at v. It returns the writes of this client
// that the registrar lost, to be sent again: only after moving to another replica
// or epoch, which may not have persisted what the last one accepted.
func (c *cache) replace(snap map[endpoint.Key]endpoint.Endpoint, v, persisted token.Version, scopeID uint64) []ownRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.covered, c.coveredID = c.scopeSet(scopeID), scopeID
	old := c.base
	newEpoch := c.at.Epoch != v.Epoch
	c.base, c.at = snap, v
	resend := c.reconcileOwn(newEpoch)
	// The view changes only where the snapshot differs from the last one, or where
	// this client's writes are shown.
	registry.Diff(old, snap, endpoint.Equal, func(_ registry.EventType, k endpoint.Key, _ endpoint.Endpoint) bool {
		c.refresh(k)
		return true
	})
	for k := range c.own {
		c.refresh(k)
	}
	c.retire()
	c.confirm(persisted)
	if !c.ready {
		c.ready = true
		close(c.readyCh)
	}
	for w := range c.watchers {
		if !w.synced && c.settled(w.filter) {
			c.sendInitial(w)
		}
	}
	c.markCurrent()
	return resend
}
