package main

import (
	"context"
	"runtime"
	"syscall"
	"time"
)

// pace calls send rate times a second for d, or until ctx ends or send returns false.
// It sleeps in the kernel, on a thread of its own, rather than on a Go timer: a Go
// process with nothing to run waits for its next timer in epoll_wait, whose timeout is
// in whole milliseconds, so a 500 µs ticker in an idle process fires about every
// 1.1 ms and "2,000 a second" came out near 1,000. The schedule is kept from the
// start: a send that comes late is made at once, not skipped (open loop), so a stall
// of the system under test is measured rather than waited out.
func pace(ctx context.Context, rate int, d time.Duration, send func() bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for next := start; ctx.Err() == nil; {
		next = next.Add(interval)
		if next.Sub(start) > d {
			return
		}
		if w := time.Until(next); w > 0 {
			ts := syscall.NsecToTimespec(int64(w))
			_ = syscall.Nanosleep(&ts, nil) // woken early by a signal: sends a little early
		}
		if !send() {
			return
		}
	}
}
