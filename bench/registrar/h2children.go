package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// h2Fatal ends a lean watcher child whose connection or stream failed: a watcher
// that silently stopped would only show as a timeout minutes later.
func h2Fatal(err error) {
	fatalIf(fmt.Errorf("lean watcher: %w", err))
}

// h2RestartWatchers is restartWatchers with lean watchers. A's connections end with
// A; once a gRPC-go probe finds another epoch answering, new connections go to B
// (before the timing starts, as gRPC-go's reconnect does), and every watcher
// resumes there with its own token.
func h2RestartWatchers(target string, n, conns int, tok string) error {
	ctx := context.Background()
	probe, err := dialN(target, 1)
	if err != nil {
		return err
	}
	defer closeAll(probe)
	before, err := answered(ctx, probe, "")
	if err != nil {
		return err
	}
	versions := make([]string, n)
	var resumed atomic.Int64
	complete := func(i int, msg []byte) error {
		ev := &registrarv1.EndpointEvent{}
		if err := proto.Unmarshal(msg, ev); err != nil {
			return err
		}
		versions[i] = ev.GetVersion()
		if ev.GetResumed() {
			resumed.Add(1)
		}
		return nil
	}
	atA, err := dialH2N(target, conns, nil) // their end is the point: not fatal
	if err != nil {
		return err
	}
	var ended sync.WaitGroup
	ended.Add(n)
	if _, err := h2Watchers(atA, slices.Repeat([]string{tok}, n), complete, nil, func(error) { ended.Done() }); err != nil {
		closeH2(atA)
		return err
	}
	fmt.Println("ready")
	err = waitGroup(&ended, 5*time.Minute)
	closeH2(atA)
	if err != nil {
		return fmt.Errorf("the first registrar's streams did not end: %w", err)
	}
	if _, err := answered(ctx, probe, before); err != nil {
		return err
	}
	atB, err := dialH2N(target, conns, h2Fatal)
	if err != nil {
		return err
	}
	defer closeH2(atB)
	resumed.Store(0)
	took, err := h2Watchers(atB, slices.Clone(versions), complete, nil, h2Fatal)
	if err != nil {
		return err
	}
	fmt.Println(int64(took))
	fmt.Println(resumed.Load())
	fmt.Println(int64(n) - resumed.Load())
	return nil
}
