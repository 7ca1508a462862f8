// Package hostspeed reads how fast the host is at the moment, for benchmark
// reports. On a shared or virtual machine the same binary can run a scenario
// twice as fast in one half-hour as in the next, and the load average does not
// always show it; two fixed pieces of work timed beside the results — one core
// hashing, copying memory, and loopback TCP, which every scenario here crosses —
// tell a reader which runs were made on the same footing.
package hostspeed

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"time"
)

// Reading is one probe of the host.
type Reading struct {
	// Hash is the best of several timings of SHA-256 over 4 MiB on one core.
	Hash time.Duration
	// Copy is the best of several copies of 64 MiB, in GB/s: memory bandwidth,
	// which a neighbour on the same host takes without showing in the load.
	Copy float64
	// Loopback is the best of several transfers of 64 MiB from one goroutine to
	// another over TCP on 127.0.0.1, in GB/s.
	Loopback float64
}

func (r Reading) String() string {
	return fmt.Sprintf("SHA-256 of 4 MiB %.1f ms, memory copy %.1f GB/s, loopback TCP %.2f GB/s",
		float64(r.Hash.Microseconds())/1000, r.Copy, r.Loopback)
}

const (
	hashBytes     = 4 << 20
	copyBytes     = 64 << 20
	loopbackBytes = 64 << 20
	tries         = 5
)

// Measure probes the host: about half a second on an idle 2-core machine.
// Each figure is the best of a few tries, so that it reads the host's speed
// rather than a moment's interruption.
func Measure() (Reading, error) {
	r := Reading{Hash: hashTime(), Copy: copyRate()}
	for range tries {
		gbps, err := loopback()
		if err != nil {
			return Reading{}, err
		}
		r.Loopback = max(r.Loopback, gbps)
	}
	return r, nil
}

func hashTime() time.Duration {
	buf := make([]byte, hashBytes)
	for i := range buf {
		buf[i] = byte(i)
	}
	best := time.Duration(1<<63 - 1)
	for range tries {
		start := time.Now()
		sha256.Sum256(buf)
		best = min(best, time.Since(start))
	}
	return best
}

func copyRate() float64 {
	src, dst := make([]byte, copyBytes), make([]byte, copyBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in before timing
	best := time.Duration(1<<63 - 1)
	for range tries {
		start := time.Now()
		copy(dst, src)
		best = min(best, time.Since(start))
	}
	return float64(copyBytes) / best.Seconds() / 1e9
}

// loopback times one transfer of loopbackBytes over a fresh TCP connection on
// 127.0.0.1 and returns its rate in GB/s.
func loopback() (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		got <- result{n, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	chunk := make([]byte, 256<<10)
	start := time.Now()
	for sent := 0; sent < loopbackBytes; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.Close()
	res := <-got
	took := time.Since(start)
	if res.err != nil {
		return 0, res.err
	}
	if res.n != loopbackBytes {
		return 0, fmt.Errorf("loopback probe: received %d bytes, sent %d", res.n, loopbackBytes)
	}
	return float64(res.n) / took.Seconds() / 1e9, nil
}
