package nodeauth

import (
	"container/heap"
	"fmt"
	"sync"
	"time"
)

// replayCache remembers accepted nonces until the tokens carrying them would be
// rejected as expired anyway, so the memory held is bounded by the accept rate times
// the window, and by max entries on top. Only nonces of authenticated tokens are
// added, so an attacker without a secret cannot fill it; and each owner (the
// identity a token proved) may hold at most a share of it, so one compromised
// identity presenting fresh token after token fills only its own share and cannot
// lock the others out.
type replayCache struct {
	mu       sync.Mutex
	max      int
	perOwner int
	seen     map[string]time.Time
	owned    map[string]int // live entries by owner
	byTime   expiryHeap
}

// ownerShare is the most live entries one owner may hold, at most: far above what a
// node's reconnects use (a token per attempt, attempts seconds apart, tokens living
// minutes), far below the whole cache.
const ownerShare = 256

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, perOwner: min(ownerShare, max), seen: make(map[string]time.Time), owned: make(map[string]int)}
}

// add records key, proved by owner, until expires. It returns ErrReplayed when key is
// already live and ErrReplayCacheFull when max live keys exist, or owner holds its
// share: failing closed keeps a replay from slipping through an eviction; the node's
// next attempt succeeds once entries expire.
func (c *replayCache) add(owner, key string, expires, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune(now)
	_, live := c.seen[key]
	switch {
	case live:
		return ErrReplayed
	case len(c.seen) >= c.max:
		return ErrReplayCacheFull
	case c.owned[owner] >= c.perOwner:
		return fmt.Errorf("%w: %d live tokens of this identity", ErrReplayCacheFull, c.owned[owner])
	}
	c.seen[key] = expires
	c.owned[owner]++
	heap.Push(&c.byTime, expiry{key: key, owner: owner, at: expires})
	return nil
}

// prune drops every entry whose expiry has passed.
func (c *replayCache) prune(now time.Time) {
	for len(c.byTime) > 0 && !c.byTime[0].at.After(now) {
		e := heap.Pop(&c.byTime).(expiry)
		delete(c.seen, e.key)
		if c.owned[e.owner]--; c.owned[e.owner] <= 0 {
			delete(c.owned, e.owner)
		}
	}
}

func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

type expiry struct {
	key, owner string
	at         time.Time
}

type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
