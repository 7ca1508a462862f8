package hub

import "sync"

// pool is the senders: goroutines that run queued watchers until there are
// none, started as watchers are queued while every sender is busy.
type pool[R runner] struct {
	mu      sync.Mutex
	queue   []R
	running int // senders started and not ended
	free    int // of those, the ones not running a watcher
}

func (p *pool[R]) push(ws ...R) {
	p.mu.Lock()
	p.queue = append(p.queue, ws...)
	// Start senders for the work, one per watcher queued, while every one is busy.
	n := p.reserve(min(len(ws)-p.free, BusySenders-p.running))
	p.mu.Unlock()
	p.start(n)
}

// unstick starts senders for work that waits while stalled sends hold senders:
// up to BusySenders senders not stalled.
func (p *pool[R]) unstick(stalled int) {
	p.mu.Lock()
	n := 0
	if p.free == 0 {
		n = min(len(p.queue), BusySenders+stalled-p.running, MaxSenders-p.running)
	}
	n = p.reserve(n)
	p.mu.Unlock()
	p.start(n)
}

// reserve counts n senders (none if n is negative) as started, and returns how
// many to start. Callers hold p.mu.
func (p *pool[R]) reserve(n int) int {
	n = max(n, 0)
	p.running += n
	p.free += n
	return n
}

// start starts the n senders reserve counted.
func (p *pool[R]) start(n int) {
	for range n {
		go p.work()
	}
}

// work is a sender: it runs queued watchers until there are none.
func (p *pool[R]) work() {
	p.mu.Lock()
	for len(p.queue) > 0 {
		w := p.queue[0]
		var none R
		p.queue[0] = none
		p.queue = p.queue[1:]
		if len(p.queue) == 0 {
			p.queue = nil // let a long queue's array go
		}
		p.free--
		p.mu.Unlock()
		drain(w)
		p.mu.Lock()
		p.free++
	}
	p.running--
	p.free--
	p.mu.Unlock()
}
