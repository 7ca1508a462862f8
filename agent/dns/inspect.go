package dns

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats is what the agent's page shows of the DNS server: read-only
// introspection.
type Stats struct {
	Addr, Domain string
	// Queries counts the queries answered since the server started.
	Queries uint64
	// PerSecond is the rate of answered queries over the last Over; Over is zero
	// until two samples at least a second apart have been taken.
	PerSecond float64
	Over      time.Duration
}

// The rate is sampled when Stats is called, not by a goroutine of its own: a page
// that nobody opens costs nothing. Samples closer than sampleEvery are not kept;
// the rate spans the oldest sample within rateWindow, or, after a quiet spell, the
// newest one.
const (
	sampleEvery = time.Second
	rateWindow  = 30 * time.Second
	rateSamples = 32 // more than rateWindow/sampleEvery
)

type sample struct {
	at time.Time
	n  uint64
}

// stats counts answered queries and keeps the samples of that count.
type stats struct {
	answered atomic.Uint64 // bumped by every answer: no lock on the query path

	mu      sync.Mutex
	samples [rateSamples]sample // ring, oldest at (next-n)
	next, n int
}

// Stats returns the query count and its recent rate.
func (s *Server) Stats() Stats { return s.statsAt(time.Now()) }

func (s *Server) statsAt(now time.Time) Stats {
	st := Stats{Addr: s.addr(), Domain: s.opts.Domain}
	st.Queries, st.PerSecond, st.Over = s.stats.rate(now)
	return st
}

// rate returns the count of answered queries and its rate since the sample the
// rate is measured from (over is zero when there is none yet).
func (st *stats) rate(now time.Time) (n uint64, perSecond float64, over time.Duration) {
	n = st.answered.Load()
	base, ok := st.sample(now, n)
	if dt := now.Sub(base.at); ok && dt >= sampleEvery {
		return n, float64(n-base.n) / dt.Seconds(), dt
	}
	return n, 0, 0
}

// sample records (now, n) unless the newest sample is younger than sampleEvery,
// and returns the sample the rate is measured from; ok is false on the first call.
func (st *stats) sample(now time.Time, n uint64) (base sample, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	at := func(i int) sample { return st.samples[(st.next-st.n+i+rateSamples)%rateSamples] }
	if st.n > 0 {
		ok = true
		base = at(st.n - 1) // the newest, unless one within the window is older
		for i := range st.n {
			if s := at(i); now.Sub(s.at) <= rateWindow {
				base = s
				break
			}
		}
	}
	if st.n == 0 || now.Sub(at(st.n-1).at) >= sampleEvery {
		st.samples[st.next] = sample{at: now, n: n}
		st.next = (st.next + 1) % rateSamples
		st.n = min(st.n+1, rateSamples)
	}
	return base, ok
}
