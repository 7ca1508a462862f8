package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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

// measure runs the three scenarios against t.
func measure(ctx context.Context, t target, o options) (result, error) {
	r := result{system: t.name(), throughputMessages: o.messages}
	var received atomic.Int64
	lat := make(chan time.Duration, 1<<20)
	measuring := atomic.Bool{}
	if err := t.subscribe(ctx, 1, func(p []byte) {
		received.Add(1)
		if measuring.Load() {
			select {
			case lat <- time.Since(sentAt(p)):
			default:
			}
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
		for int64(sent)-(received.Load()-base) >= int64(o.window) {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			time.Sleep(20 * time.Microsecond)
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
	measuring.Store(true)
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	end := time.After(o.latencyFor)
pace:
	for {
		select {
		case <-tick.C:
			if err := t.publish(stamp(payload), false); err != nil {
				return r, err
			}
			if err := t.flush(); err != nil {
				return r, err
			}
		case <-end:
			break pace
		}
	}
	tick.Stop()
	time.Sleep(200 * time.Millisecond)
	measuring.Store(false)
	close(lat)
	var ds []time.Duration
	for d := range lat {
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return r, errors.New("no latency samples")
	}
	slices.Sort(ds)
	r.p50, r.p99, r.latencySamples = ds[len(ds)/2], ds[len(ds)*99/100], len(ds)
	// Fan-out.
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
	start = time.Now()
	for sent := 0; sent < o.fanoutMessages; {
		for int64(sent)*int64(o.fanout)-(fanGot.Load()-fanBase) >= int64(o.window)*4 {
			time.Sleep(20 * time.Microsecond)
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
	r.fanoutPerSec = float64(fg) / fanElapsed.Seconds()
	if fg < want {
		r.fanoutLost = uint64(want - fg)
	}
	r.dropped = t.dropped()
	return r, nil
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
