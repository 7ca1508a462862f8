package nodeauth

import (
	"container/heap"
	"sync"
	"time"
)

// replayCache remembers accepted nonces until the tokens carrying them would be
// rejected as expired anyway, so the memory held is bounded by the accept rate times
// the window, and by max entries on top. Only nonces of authenticated tokens are
// added, so an attacker without a secret cannot fill it.
type replayCache struct {
	mu     sync.Mutex
	max    int
	seen   map[string]time.Time
	byTime expiryHeap
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, seen: make(map[string]time.Time)}
}

// add records key until expires. It returns ErrReplayed when key is already live and
// ErrReplayCacheFull when max live keys exist: failing closed keeps a replay from
// slipping through an eviction; the node's next attempt succeeds once entries expire.
func (c *replayCache) add(key string, expires, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune(now)
	if _, ok := c.seen[key]; ok {
		return ErrReplayed
	}
	if len(c.seen) >= c.max {
		return ErrReplayCacheFull
	}
	c.seen[key] = expires
	heap.Push(&c.byTime, expiry{key: key, at: expires})
	return nil
}

// prune drops every entry whose expiry has passed.
func (c *replayCache) prune(now time.Time) {
	for len(c.byTime) > 0 && !c.byTime[0].at.After(now) {
		e := heap.Pop(&c.byTime).(expiry)
		delete(c.seen, e.key)
	}
}

func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

type expiry struct {
	key string
	at  time.Time
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
