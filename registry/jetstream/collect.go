package jetstream

import (
	"runtime"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// collectChunk is how many messages a List hands to a decoding worker at a time, and
// collectQueue how many chunks may wait for one before the reader waits too.
const (
	collectChunk = 512
	collectQueue = 64
)

type rawMsg struct {
	subject string
	seq     uint64
	h       nats.Header
	data    []byte
}

// collector turns a List's messages into live entries. Decoding costs about as much
// as receiving, so full chunks go to workers on the other cores while the reader
// keeps receiving, and the reader decodes only what is left once the last message is
// in. A reader that decoded a chunk itself whenever the workers were busy stopped
// receiving meanwhile (and answering the consumer's flow control): handing every chunk
// over made a repeated full lookup 7–25 % faster in one process, in turns under the
// same load (docs/benchmarks/jetstream.md).
type collector struct {
	r *driver
	// keep, when not nil, tells which subjects the read wants: those whose address
	// token spells the filter's IPv6 address (Subjects.AddressCheck). The others are
	// dropped as they arrive, before anything is decoded.
	keep func(subject string) bool
	// remember: the payloads decoded go into the driver's cache. A driver's first
	// List does not fill it: a one-shot reader (`switchboard registry lookup`) would
	// pay for a cache it never reads, and handing out the cache's endpoints costs a
	// copy of each (detach). Collecting 10,000 messages this way takes 14 ms of CPU,
	// against 23 ms when they are cached as they are decoded. A driver that reads
	// again decodes every payload once more, then reads from the cache.
	remember bool
	own      *decoder // finish's; each worker has its own
	chunk    []rawMsg
	work     chan job
	wg       sync.WaitGroup
	// all, when expect sized it, has a window for each chunk, in the order the
	// chunks were made (next is where the next one starts): finish closes the gaps
	// instead of joining the chunks into one more slice as large as the lookup.
	all  collected
	next int

	mu    sync.Mutex
	parts []collected // one per chunk, in no particular order
}

// job is a chunk of messages and where its window in collector.all starts.
type job struct {
	msgs []rawMsg
	at   int
}

// collected is one chunk's live entries, each with its stream sequence. Chunks are
// kept apart until finish, which knows the total: appending them to one slice as they
// came grew it again and again (4 % of a full lookup's CPU).
type collected struct {
	eps  []endpoint.Endpoint
	seqs []uint64
	at   int // the window's start in collector.all; -1 for a slice of its own
}

// newCollector returns the collector of one List; keep may be nil.
func newCollector(r *driver, keep func(subject string) bool) *collector {
	return &collector{r: r, keep: keep, own: r.decoder(), remember: r.listed.Swap(true)}
}

// add takes one message; it is called from one goroutine at a time.
func (c *collector) add(subject string, seq uint64, h nats.Header, data []byte) {
	if c.keep != nil && !c.keep(subject) {
		return
	}
	c.chunk = append(c.chunk, rawMsg{subject, seq, h, data})
	if len(c.chunk) < collectChunk {
		return
	}
	full := c.job()
	c.chunk = make([]rawMsg, 0, collectChunk)
	if c.work == nil {
		c.start()
	}
	c.work <- full
}

// job hands over the current chunk with its window.
func (c *collector) job() job {
	j := job{msgs: c.chunk, at: c.next}
	c.next += len(c.chunk)
	return j
}

// expect is told how many messages the read will bring: a first read sizes the
// payload cache for them at once rather than growing it 11 times on the way to 10,000
// (the growth, under the cache's lock, was most of a cold lookup's caching cost), and
// the entries get their windows in one slice. The count is the consumer's, taken
// before the read: a huge one is not trusted with one allocation up front. A read
// that keeps only some subjects (keep) sizes nothing: it may keep a handful of many.
func (c *collector) expect(n uint64) {
	if c.keep != nil {
		return
	}
	if c.remember {
		c.r.cache.reserve(n)
	}
	if c.next == 0 && n <= maxCachedPayloads {
		c.all = collected{eps: make([]endpoint.Endpoint, n), seqs: make([]uint64, n)}
	}
}

func (c *collector) start() {
	workers := max(1, runtime.GOMAXPROCS(0)-1)
	c.work = make(chan job, collectQueue)
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			d := c.r.decoder()
			for j := range c.work {
				c.decode(j, d)
			}
		}()
	}
}

func (c *collector) decode(j job, dec *decoder) {
	var p collected
	if end := j.at + len(j.msgs); end <= len(c.all.eps) {
		p = collected{eps: c.all.eps[j.at:j.at:end], seqs: c.all.seqs[j.at:j.at:end], at: j.at}
	} else { // more messages than expected
		p = collected{eps: make([]endpoint.Endpoint, 0, len(j.msgs)), seqs: make([]uint64, 0, len(j.msgs)), at: -1}
	}
	dec.decodeAll(j.msgs, c.remember, func(d decoded) {
		switch d.kind {
		case msgLive:
			if d.shared {
				d.ep = detachPairs(d.ep, d.ann)
			}
			p.eps = append(p.eps, d.ep)
			p.seqs = append(p.seqs, d.seq)
		case msgBad:
			c.r.noteBad(d)
		}
	})
	c.mu.Lock()
	c.parts = append(c.parts, p)
	c.mu.Unlock()
}

// joined is every chunk's entries in one slice: collector.all with its gaps closed
// when every chunk had a window there.
func (c *collector) joined() collected {
	if len(c.parts) == 1 {
		return c.parts[0]
	}
	n := 0
	windows := true
	for _, p := range c.parts {
		n += len(p.eps)
		windows = windows && p.at >= 0
	}
	if windows {
		slices.SortFunc(c.parts, func(a, b collected) int { return a.at - b.at })
		w := 0 // never past the window being moved: each holds at most its chunk
		for _, p := range c.parts {
			copy(c.all.eps[w:], p.eps)
			copy(c.all.seqs[w:], p.seqs)
			w += len(p.eps)
		}
		clear(c.all.eps[w:])
		return collected{eps: c.all.eps[:w], seqs: c.all.seqs[:w]}
	}
	all := collected{eps: make([]endpoint.Endpoint, 0, n), seqs: make([]uint64, 0, n)}
	for _, p := range c.parts {
		all.eps = append(all.eps, p.eps...)
		all.seqs = append(all.seqs, p.seqs...)
	}
	return all
}

// finish decodes what is left, stops the workers and returns the entries sorted, one
// per key: of a key's entries on different subjects (Subjects.Forms), the one written
// last. It must be called exactly once, after the last add, and always: it owns the
// workers.
func (c *collector) finish() []endpoint.Endpoint {
	c.decode(c.job(), c.own)
	if c.work != nil {
		close(c.work)
		for j := range c.work { // help the workers with what is still queued
			c.decode(j, c.own)
		}
		c.wg.Wait()
	}
	all := c.joined()
	// Put the entries in order where they are, cycle by cycle of the permutation:
	// a sorted copy was one more slice as large as the lookup, filled after the last
	// message arrived.
	order := endpoint.Order(all.eps)
	for start := range order {
		if order[start] < 0 {
			continue // placed
		}
		e, seq := all.eps[start], all.seqs[start]
		for j := start; ; {
			src := order[j]
			order[j] = -1
			if src == start {
				all.eps[j], all.seqs[j] = e, seq
				break
			}
			all.eps[j], all.seqs[j] = all.eps[src], all.seqs[src]
			j = src
		}
	}
	out := all.eps[:0] // written at or before the entry being read
	var lastSeq uint64
	for i, e := range all.eps {
		if n := len(out); n > 0 && out[n-1].Key() == e.Key() {
			if all.seqs[i] > lastSeq {
				out[n-1], lastSeq = e, all.seqs[i]
			}
			continue
		}
		out, lastSeq = append(out, e), all.seqs[i]
	}
	clear(all.eps[len(out):]) // what the caller cannot see should not hold memory
	return out
}
