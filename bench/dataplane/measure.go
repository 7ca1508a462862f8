package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// stamp writes the send time into the payload's first 8 bytes.
func stamp(p []byte) []byte {
	binary.LittleEndian.PutUint64(p, uint64(time.Now().UnixNano()))
	return p
}

func sentAt(p []byte) time.Time {
	if len(p) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.LittleEndian.Uint64(p)))
}

// streamResult is a throughput and a latency run across one path.
type streamResult struct {
	system         string
	msgsPerSec     float64
	p50, p99       time.Duration
	lost, dropped  uint64
	latencySamples int
}

// fanoutResult is a fan-out run.
type fanoutResult struct {
	perSec float64
	lost   uint64
}

// measureStream runs the throughput (windowed) and latency (paced) runs from t's
// publisher to one subscriber.
func measureStream(ctx context.Context, t target, o options) (streamResult, error) {
	r := streamResult{system: t.name()}
	var received atomic.Int64
	// Latency samples, taken while measuring; the lock keeps a late delivery from
	// adding one as they are read.
	var latMu sync.Mutex
	var ds []time.Duration
	measuring := atomic.Bool{}
	if err := t.subscribe(ctx, 1, func(p []byte) {
		received.Add(1)
		if measuring.Load() {
			d := time.Since(sentAt(p))
			latMu.Lock()
			if measuring.Load() {
				ds = append(ds, d)
			}
			latMu.Unlock()
		}
	}); err != nil {
		return r, err
	}
	payload := make([]byte, o.size)
	// Warm up until a message arrives (routes, interest propagation).
	if err := waitFor(ctx, func() bool {
		_ = t.publish(stamp(payload), false)
		_ = t.flush()
		return received.Load() > 0
	}); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	time.Sleep(200 * time.Millisecond)
	// Throughput, windowed.
	base := received.Load()
	start := time.Now()
	for sent := 0; sent < o.messages; {
		if err := waitWindow(ctx, func() bool { return int64(sent)-(received.Load()-base) < int64(o.window) }); err != nil {
			return r, err
		}
		if err := t.publish(stamp(payload), false); err != nil {
			return r, err
		}
		sent++
		if sent%64 == 0 {
			if err := t.flush(); err != nil {
				return r, err
			}
		}
	}
	if err := t.flush(); err != nil {
		return r, err
	}
	_ = waitFor(ctx, func() bool { return received.Load()-base >= int64(o.messages) }, 10*time.Second)
	elapsed := time.Since(start)
	got := received.Load() - base
	r.msgsPerSec = float64(got) / elapsed.Seconds()
	if got < int64(o.messages) {
		r.lost = uint64(int64(o.messages) - got)
	}
	// Latency, paced.
	time.Sleep(200 * time.Millisecond)
	before := received.Load()
	sentPaced := int64(0)
	measuring.Store(true)
	var sendErr error
	pace(ctx, o.rate, o.latencyFor, func() bool {
		if sendErr = t.publish(stamp(payload), false); sendErr == nil {
			sendErr = t.flush()
		}
		sentPaced++
		return sendErr == nil
	})
	if sendErr != nil {
		return r, sendErr
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	_ = waitFor(ctx, func() bool { return received.Load()-before >= sentPaced }, 5*time.Second)
	latMu.Lock()
	measuring.Store(false)
	ds = slices.Clone(ds)
	latMu.Unlock()
	if got := received.Load() - before; got < sentPaced {
		r.lost += uint64(sentPaced - got)
	}
	if len(ds) == 0 {
		return r, errors.New("no latency samples")
	}
	slices.Sort(ds)
	r.p50, r.p99, r.latencySamples = ds[len(ds)/2], ds[len(ds)*99/100], len(ds)
	return r, nil
}

// measureFanout runs the fan-out run: o.fanout subscribers, o.fanoutMessages messages.
func measureFanout(ctx context.Context, t target, o options) (fanoutResult, error) {
	var r fanoutResult
	payload := make([]byte, o.size)
	var fanGot atomic.Int64
	if err := t.subscribe(ctx, o.fanout, func([]byte) { fanGot.Add(1) }); err != nil {
		return r, err
	}
	if err := waitFor(ctx, func() bool {
		before := fanGot.Load()
		_ = t.publish(stamp(payload), true)
		_ = t.flush()
		time.Sleep(50 * time.Millisecond)
		return fanGot.Load()-before >= int64(o.fanout)
	}); err != nil {
		return r, fmt.Errorf("fan-out warm-up: %w", err)
	}
	time.Sleep(200 * time.Millisecond)
	fanBase := fanGot.Load()
	want := int64(o.fanoutMessages) * int64(o.fanout)
	start := time.Now()
	for sent := 0; sent < o.fanoutMessages; {
		if err := waitWindow(ctx, func() bool {
			return int64(sent)*int64(o.fanout)-(fanGot.Load()-fanBase) < int64(o.window)*4
		}); err != nil {
			return r, err
		}
		if err := t.publish(stamp(payload), true); err != nil {
			return r, err
		}
		sent++
		if sent%16 == 0 {
			_ = t.flush()
		}
	}
	_ = t.flush()
	_ = waitFor(ctx, func() bool { return fanGot.Load()-fanBase >= want }, 10*time.Second)
	fanElapsed := time.Since(start)
	fg := fanGot.Load() - fanBase
	r.perSec = float64(fg) / fanElapsed.Seconds()
	if fg < want {
		r.lost = uint64(want - fg)
	}
	return r, nil
}

// windowStuck bounds how long a publisher waits for room in its window: a window that
// stays shut that long is one that copies lost in flight closed for good.
const windowStuck = 10 * time.Second

// waitWindow waits, spinning briefly, until room holds, for at most windowStuck.
func waitWindow(ctx context.Context, room func() bool) error {
	if room() {
		return nil
	}
	deadline := time.Now().Add(windowStuck)
	for !room() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the window stayed full for %s: copies lost in flight", windowStuck)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// waitFor polls cond until it holds; an optional limit bounds the wait (ctx always does).
func waitFor(ctx context.Context, cond func() bool, limit ...time.Duration) error {
	d := 30 * time.Second
	if len(limit) > 0 {
		d = limit[0]
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
